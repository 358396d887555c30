// The HTTP shapes of the orders API, declared for the OpenAPI description (@nestjs/swagger), and
// the check of a new order's body (by hand: three fields do not need a validation library).
import { BadRequestException } from '@nestjs/common';
import { ApiProperty } from '@nestjs/swagger';
import type { OrderLine } from './order.entity.js';

export class OrderLineDto {
  @ApiProperty({ example: 'SKU-1', minLength: 1 })
  sku: string;

  @ApiProperty({ example: 2, minimum: 1, type: 'integer' })
  quantity: number;

  @ApiProperty({ example: 1250, minimum: 0, type: 'integer' })
  unit_price_cents: number;
}

export class NewOrderDto {
  @ApiProperty({ example: 'c-42', minLength: 1 })
  customer_id: string;

  @ApiProperty({ type: [OrderLineDto], minItems: 1 })
  lines: OrderLineDto[];
}

export class OrderDto {
  @ApiProperty({ format: 'uuid' })
  id: string;

  @ApiProperty()
  customer_id: string;

  @ApiProperty({ type: [OrderLineDto] })
  lines: OrderLineDto[];

  @ApiProperty({ type: 'integer', description: 'Sum of quantity × unit_price_cents' })
  total_cents: number;

  @ApiProperty({ example: 'placed' })
  status: string;

  @ApiProperty({ format: 'date-time' })
  created_at: string;
}

export const CONSISTENCY_VALUES = ['applied', 'stale', 'eventual'] as const;
export type SummaryConsistency = (typeof CONSISTENCY_VALUES)[number];

const CONSISTENCY_DESCRIPTION =
  '`applied`: the request carried a Highwater-Token and the projection had applied it before the read; ' +
  '`stale`: it carried one but the wait timed out, so the answer may miss that write; ' +
  '`eventual`: no token, the read model as it is now (it trails the writes by the projection lag).';

export class OrderSummaryDto {
  @ApiProperty()
  order_id: string;

  @ApiProperty()
  customer_id: string;

  @ApiProperty({ type: 'integer' })
  item_count: number;

  @ApiProperty({ type: 'integer' })
  total_cents: number;

  @ApiProperty({ example: 'placed' })
  status: string;

  @ApiProperty({ format: 'date-time' })
  placed_at: string;

  @ApiProperty({ format: 'date-time', description: 'When the projection applied the event' })
  applied_at: string;

  @ApiProperty({ enum: CONSISTENCY_VALUES, description: CONSISTENCY_DESCRIPTION })
  consistency: SummaryConsistency;
}

export class SummaryNotFoundDto {
  @ApiProperty({ example: 'no summary of order 0b9c… in the read model' })
  error: string;

  @ApiProperty({ enum: CONSISTENCY_VALUES, description: CONSISTENCY_DESCRIPTION })
  consistency: SummaryConsistency;
}

export class ErrorDto {
  @ApiProperty()
  error: string;
}

function fail(message: string): never {
  throw new BadRequestException({ error: message });
}

/** The body of POST /orders, checked: a customer and at least one well-formed line. */
export function parseNewOrder(body: unknown): { customerId: string; lines: OrderLine[] } {
  if (typeof body !== 'object' || body === null) fail('the body must be a JSON object');
  const { customer_id, lines } = body as Record<string, unknown>;
  if (typeof customer_id !== 'string' || customer_id === '') fail('customer_id must be a non-empty string');
  if (!Array.isArray(lines) || lines.length === 0) fail('lines must be a non-empty array');
  const parsed = lines.map((l: unknown, i): OrderLine => {
    const { sku, quantity, unit_price_cents } = (l ?? {}) as Record<string, unknown>;
    if (typeof sku !== 'string' || sku === '') fail(`lines[${i}].sku must be a non-empty string`);
    if (!Number.isSafeInteger(quantity) || (quantity as number) < 1) fail(`lines[${i}].quantity must be an integer ≥ 1`);
    if (!Number.isSafeInteger(unit_price_cents) || (unit_price_cents as number) < 0) {
      fail(`lines[${i}].unit_price_cents must be an integer ≥ 0`);
    }
    return { sku, quantity: quantity as number, unit_price_cents: unit_price_cents as number };
  });
  return { customerId: customer_id, lines: parsed };
}
