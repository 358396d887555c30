// Type-checked (not run) against the packed declarations: the public API as an application
// written in TypeScript sees it.
import {
  type Appended,
  type Executor,
  type NewEvent,
  type Token,
  type WaitResult,
  InvalidPayload,
  VersionConflict,
  append,
  appendPosition,
  highwaterTokens,
  readYourWrites,
  token,
  waitApplied,
  waitAppliedHttp,
} from '@highwater/client';

export async function placeOrder(tx: Executor, id: string): Promise<Token> {
  const event: NewEvent = { streamType: 'order', streamId: id, type: 'OrderPlaced', payload: { order_id: id, total: 5 } };
  try {
    const eventId: string = await append(tx, { ...event, expectedVersion: 0 });
    const pos: Appended = await appendPosition(tx, event);
    void eventId;
    void pos.txId;
  } catch (e) {
    if (e instanceof InvalidPayload) console.error(e.path, e.reason);
    if (e instanceof VersionConflict) console.error(e.actualVersion);
    throw e;
  }
  return token(tx);
}

export async function waits(db: Executor, t: Token): Promise<boolean> {
  const a: WaitResult = await waitApplied(db, 'order-projection', t, { timeout: 1000 });
  const b: WaitResult = await waitAppliedHttp('http://localhost:8080', 'order-projection', t, { timeout: 1000, authToken: 'x' });
  return a.applied && b.applied;
}

export const middleware = [highwaterTokens(), readYourWrites({ consumer: 'order-projection', db: {} as Executor })];
