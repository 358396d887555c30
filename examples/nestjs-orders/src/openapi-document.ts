// The OpenAPI description, generated from the controllers' decorators: served by the running
// application at /openapi.json and written to openapi.json by `npm run openapi`.
import type { INestApplication } from '@nestjs/common';
import { DocumentBuilder, type OpenAPIObject, SwaggerModule } from '@nestjs/swagger';

export function openApiDocument(app: INestApplication): OpenAPIObject {
  const config = new DocumentBuilder()
    .setTitle('highwater example: orders (NestJS)')
    .setDescription(
      'Orders written with their OrderPlaced event in one transaction; summaries read from a read model that ' +
        'highwater projects after commit. Operations carry `x-consistency`: `strong` (write model) or `eventual` ' +
        '(read model; send the Highwater-Token of your write to read it back).',
    )
    .setVersion('0.1.0')
    .build();
  return SwaggerModule.createDocument(app, config);
}
