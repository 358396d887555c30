// The token sink of the request being handled (set by the highwaterTokens middleware): every
// token this package reads during the request is reported there. Internal: not exported.
import { AsyncLocalStorage } from 'node:async_hooks';

export const tokenSink = new AsyncLocalStorage<(token: string) => void>();
