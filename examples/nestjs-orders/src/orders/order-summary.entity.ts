// The read model: rows written only by the order-summary consumer (consumers/order-summary.yaml)
// when highwater delivers OrderPlaced; the application never writes them.
import { Column, Entity, PrimaryColumn } from 'typeorm';

@Entity('order_summary')
export class OrderSummary {
  @PrimaryColumn('text', { name: 'order_id' })
  orderId: string;

  @Column('text', { name: 'customer_id' })
  customerId: string;

  @Column('integer', { name: 'item_count' })
  itemCount: number;

  @Column('integer', { name: 'total_cents' })
  totalCents: number;

  @Column('text')
  status: string;

  @Column('timestamptz', { name: 'placed_at' })
  placedAt: Date;

  @Column('bigint', { name: 'last_event_id' })
  lastEventId: string;

  @Column('timestamptz', { name: 'applied_at' })
  appliedAt: Date;
}
