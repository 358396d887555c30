// The orders API. POST /orders and GET /orders/:id use the write model; GET /orders/:id/summary
// reads the read model the order-summary consumer builds, behind the read-your-writes guard
// (wired in orders.module.ts), and says in its answer how consistent that read was.
import { Body, Controller, Get, HttpCode, NotFoundException, Param, ParseUUIDPipe, Post, Res } from '@nestjs/common';
import {
  ApiBadRequestResponse,
  ApiBody,
  ApiCreatedResponse,
  ApiExtension,
  ApiHeader,
  ApiNotFoundResponse,
  ApiOkResponse,
  ApiOperation,
  ApiTags,
  ApiUnprocessableEntityResponse,
} from '@nestjs/swagger';
import { CONSISTENCY_HEADER, TOKEN_HEADER } from '@highwater/client';
import type { Response } from 'express';
import {
  ErrorDto,
  NewOrderDto,
  OrderDto,
  OrderSummaryDto,
  type SummaryConsistency,
  SummaryNotFoundDto,
  parseNewOrder,
} from './dto.js';
import type { Order } from './order.entity.js';
import type { OrderSummary } from './order-summary.entity.js';
import { OrdersService } from './orders.service.js';

const TOKEN_RESPONSE_HEADER = {
  [TOKEN_HEADER]: {
    description: 'The consistency token of the write: send it back as the Highwater-Token request header of GET /orders/{id}/summary',
    schema: { type: 'string', pattern: '^[0-9]{1,20}$', example: '7421' },
  },
};
const CONSISTENCY_RESPONSE_HEADERS = {
  [CONSISTENCY_HEADER]: {
    description:
      'Only when the request carried a Highwater-Token: `applied` (the read model held the write before the read) or `stale` (the wait timed out; the answer may miss the write)',
    schema: { type: 'string', enum: ['applied', 'stale'] },
  },
  Vary: { description: 'Includes Highwater-Token', schema: { type: 'string' } },
};

function orderJson(o: Order): OrderDto {
  return {
    id: o.id,
    customer_id: o.customerId,
    lines: o.lines,
    total_cents: o.totalCents,
    status: o.status,
    created_at: o.createdAt.toISOString(),
  };
}

function summaryJson(s: OrderSummary, consistency: SummaryConsistency): OrderSummaryDto {
  return {
    order_id: s.orderId,
    customer_id: s.customerId,
    item_count: s.itemCount,
    total_cents: s.totalCents,
    status: s.status,
    placed_at: s.placedAt.toISOString(),
    applied_at: s.appliedAt.toISOString(),
    consistency,
  };
}

@ApiTags('orders')
@Controller('orders')
export class OrdersController {
  constructor(private readonly orders: OrdersService) {}

  @Post()
  @HttpCode(201)
  @ApiOperation({
    summary: 'Place an order',
    description:
      'Writes the order and appends its OrderPlaced event in one transaction: both are stored or neither is. ' +
      'The Highwater-Token response header carries the write\'s consistency token.',
  })
  @ApiExtension('x-consistency', 'strong')
  @ApiBody({ type: NewOrderDto })
  @ApiCreatedResponse({ type: OrderDto, headers: TOKEN_RESPONSE_HEADER, description: 'The order as stored, with its event' })
  @ApiBadRequestResponse({ type: ErrorDto, description: 'The body is not a valid order' })
  @ApiUnprocessableEntityResponse({
    type: ErrorDto,
    description: "Above the customer's credit limit: nothing is stored (no order, no event)",
  })
  async place(@Body() body: unknown): Promise<OrderDto> {
    const { customerId, lines } = parseNewOrder(body);
    return orderJson(await this.orders.place(customerId, lines));
  }

  @Get(':id')
  @ApiOperation({ summary: 'Read an order from the write model', description: 'Strongly consistent: the latest committed state.' })
  @ApiExtension('x-consistency', 'strong')
  @ApiOkResponse({ type: OrderDto, description: 'The order' })
  @ApiNotFoundResponse({ type: ErrorDto, description: 'No such order' })
  async find(@Param('id', ParseUUIDPipe) id: string): Promise<OrderDto> {
    const order = await this.orders.find(id);
    if (!order) throw new NotFoundException({ error: `no order ${id}` });
    return orderJson(order);
  }

  @Get(':id/summary')
  @ApiOperation({
    summary: "Read an order's summary from the read model (eventually consistent)",
    description:
      'Eventually consistent: the summary is built by the order-summary consumer after the order commits, so it trails ' +
      'the write by the projection lag. Without a Highwater-Token it answers at once with what the read model holds ' +
      '(`consistency: eventual`). With the token a POST returned, it first waits (bounded, SUMMARY_WAIT_MS, default ' +
      '2 s) until the consumer applied that write, then answers with `consistency: applied`; if the wait times out it ' +
      'answers with what it has and says so: `consistency: stale` and `Highwater-Consistency: stale` (a 404 then ' +
      'means "not projected yet", not "no such order").',
  })
  @ApiExtension('x-consistency', 'eventual')
  @ApiHeader({
    name: TOKEN_HEADER,
    required: false,
    description: 'The Highwater-Token of a write (several, comma-separated: the largest counts); the read then includes it unless it answers stale',
    schema: { type: 'string', pattern: '^[0-9]{1,20}(,\\s*[0-9]{1,20})*$' },
  })
  @ApiOkResponse({ type: OrderSummaryDto, headers: CONSISTENCY_RESPONSE_HEADERS, description: 'The summary as the read model holds it' })
  @ApiNotFoundResponse({
    type: SummaryNotFoundDto,
    headers: CONSISTENCY_RESPONSE_HEADERS,
    description: 'Not in the read model (yet, when consistency is `eventual` or `stale`)',
  })
  @ApiBadRequestResponse({ type: ErrorDto, description: 'A malformed Highwater-Token header, or an id that is not a UUID' })
  async summary(
    @Param('id', ParseUUIDPipe) id: string,
    @Res({ passthrough: true }) res: Response,
  ): Promise<OrderSummaryDto> {
    // Set by the readYourWrites guard when the request carried a token; no token, no wait.
    const consistency: SummaryConsistency = res.locals.highwaterConsistency ?? 'eventual';
    const summary = await this.orders.findSummary(id);
    if (!summary) throw new NotFoundException({ error: `no summary of order ${id} in the read model`, consistency });
    return summaryJson(summary, consistency);
  }
}
