// The read-your-writes guard of GET /orders/:id/summary: @highwater/client's readYourWrites,
// waiting for the summary's consumer either through the dispatcher's HTTP wait endpoint (when
// HIGHWATER_DISPATCHER_URL is set: no database connection held while waiting) or over SQL on a
// pool of its own (LISTEN highwater_applied: each waiting request holds one of its connections,
// so the application's TypeORM pool is never drained by waits).
import { Inject, Injectable, type NestMiddleware, type OnModuleDestroy } from '@nestjs/common';
import { type Middleware, readYourWrites } from '@highwater/client';
import type { NextFunction, Request, Response } from 'express';
import pg from 'pg';
import { CONFIG, type Config } from '../config.js';

@Injectable()
export class ReadYourWritesMiddleware implements NestMiddleware, OnModuleDestroy {
  private readonly pool?: pg.Pool;
  private readonly guard: Middleware;

  constructor(@Inject(CONFIG) config: Config) {
    const common = { consumer: config.summaryConsumer, timeout: config.summaryWaitMs };
    if (config.dispatcher) {
      this.guard = readYourWrites({ ...common, http: config.dispatcher });
    } else {
      this.pool = new pg.Pool({ connectionString: config.databaseUrl, max: config.waitPoolMax });
      this.guard = readYourWrites({ ...common, db: this.pool });
    }
  }

  use(req: Request, res: Response, next: NextFunction): void {
    void this.guard(req, res, next);
  }

  async onModuleDestroy(): Promise<void> {
    await this.pool?.end();
  }
}
