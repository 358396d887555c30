// Every handler of this application rolls its transaction back when it throws, so a token that
// highwaterTokens recorded during a failed request names a transaction that never committed:
// the error response must not hand it out as if the write had happened.
import { type ArgumentsHost, Catch } from '@nestjs/common';
import { BaseExceptionFilter } from '@nestjs/core';
import { TOKEN_HEADER } from '@highwater/client';
import type { Response } from 'express';

@Catch()
export class UncommittedTokenFilter extends BaseExceptionFilter {
  override catch(exception: unknown, host: ArgumentsHost): void {
    const res = host.switchToHttp().getResponse<Response>();
    if (!res.headersSent) res.removeHeader(TOKEN_HEADER);
    super.catch(exception, host);
  }
}
