// Starts the orders application: DATABASE_URL, HOST, PORT and the rest in config.ts.
import 'reflect-metadata';
import { HttpAdapterHost, NestFactory } from '@nestjs/core';
import { highwaterTokens } from '@highwater/client';
import { AppModule } from './app.module.js';
import { CONFIG, type Config } from './config.js';
import { openApiDocument } from './openapi-document.js';
import { UncommittedTokenFilter } from './uncommitted-token.filter.js';

const app = await NestFactory.create(AppModule);
// Before every route: a response whose request appended events carries their Highwater-Token.
app.use(highwaterTokens());
app.useGlobalFilters(new UncommittedTokenFilter(app.get(HttpAdapterHost).httpAdapter));
// Browsers on other origins must be allowed to send the token and to read both headers.
app.enableCors({
  exposedHeaders: ['Highwater-Token', 'Highwater-Consistency'],
  allowedHeaders: ['Content-Type', 'Highwater-Token'],
});
const document = openApiDocument(app);
app.getHttpAdapter().get('/openapi.json', (_req: unknown, res: { json(body: unknown): void }) => res.json(document));
app.enableShutdownHooks();

const config = app.get<Config>(CONFIG);
await app.listen(config.port, config.host);
console.log(`orders listening on http://${config.host}:${config.port}`);
