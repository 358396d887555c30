// Placing an order: the order row and its OrderPlaced event in one transaction, so either both
// are stored or neither is. The event's token reaches the response through the highwaterTokens
// middleware (main.ts), which records every append made while the request is handled.
import { randomUUID } from 'node:crypto';
import { HttpException, HttpStatus, Inject, Injectable } from '@nestjs/common';
import { append } from '@highwater/client';
import { DataSource } from 'typeorm';
import { CONFIG, type Config } from '../config.js';
import { Order, type OrderLine } from './order.entity.js';
import { OrderSummary } from './order-summary.entity.js';

/** The customer's placed orders would exceed the credit limit: 422, and nothing is stored. */
export class CreditLimitExceeded extends HttpException {
  constructor(customerId: string, exposureCents: number, limitCents: number) {
    super(
      {
        error: `customer ${customerId} would owe ${exposureCents} cents with this order, above the limit of ${limitCents}`,
      },
      HttpStatus.UNPROCESSABLE_ENTITY,
    );
  }
}

@Injectable()
export class OrdersService {
  constructor(
    private readonly dataSource: DataSource,
    @Inject(CONFIG) private readonly config: Config,
  ) {}

  async place(customerId: string, lines: OrderLine[]): Promise<Order> {
    const totalCents = lines.reduce((sum, l) => sum + l.quantity * l.unit_price_cents, 0);
    return this.dataSource.transaction(async (em) => {
      const order = em.create(Order, { id: randomUUID(), customerId, lines, totalCents, status: 'placed' });
      await em.insert(Order, order);
      await append(em, {
        streamType: 'order',
        streamId: order.id,
        type: 'OrderPlaced',
        payload: { order_id: order.id, customer_id: customerId, lines, total_cents: totalCents },
      });
      // The credit check reads the customer's orders including this one, inside the same
      // transaction: a refusal here rolls back the order row and the event appended above.
      const { exposure } = (await em
        .createQueryBuilder(Order, 'o')
        .select('coalesce(sum(o.total_cents), 0)::bigint::text', 'exposure')
        .where('o.customer_id = :customerId AND o.status = :status', { customerId, status: 'placed' })
        .getRawOne()) as { exposure: string };
      if (Number(exposure) > this.config.creditLimitCents) {
        throw new CreditLimitExceeded(customerId, Number(exposure), this.config.creditLimitCents);
      }
      // created_at is the database's default: read it back for the response.
      return em.findOneByOrFail(Order, { id: order.id });
    });
  }

  /** The write model: always the latest committed state. */
  find(id: string): Promise<Order | null> {
    return this.dataSource.getRepository(Order).findOneBy({ id });
  }

  /** The read model: whatever the projection has applied so far. */
  findSummary(id: string): Promise<OrderSummary | null> {
    return this.dataSource.getRepository(OrderSummary).findOneBy({ orderId: id });
  }
}
