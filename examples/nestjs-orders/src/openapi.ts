// `npm run openapi`: prints the OpenAPI description without a database (Nest's preview mode
// resolves the modules but instantiates no provider, so nothing connects).
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module.js';
import { openApiDocument } from './openapi-document.js';

const app = await NestFactory.create(AppModule, { preview: true, logger: false });
process.stdout.write(JSON.stringify(openApiDocument(app), null, 2) + '\n');
await app.close();
