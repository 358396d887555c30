export { append, appendPosition, token, isToken } from './events.js';
export type { Appended, NewEvent, Token } from './events.js';
export type { DrizzleLike, Executor, KnexLike, KyselyLike, PrismaLike, Queryable } from './executor.js';
export { HighwaterError, InvalidPayload, LimitExceeded, UnknownConsumer, UnknownEventType, VersionConflict } from './errors.js';
export type { HighwaterErrorOptions } from './errors.js';
export { closeWaits, waitApplied, waitAppliedHttp } from './wait.js';
export type { HttpWaitOptions, WaitOptions, WaitResult } from './wait.js';
export { CONSISTENCY_HEADER, TOKEN_HEADER, highwaterTokens, readYourWrites, recordToken } from './express.js';
export type {
  Consistency,
  Middleware,
  NextFunction,
  ReadYourWritesOptions,
  RequestLike,
  ResponseLike,
  TokenOptions,
} from './express.js';
