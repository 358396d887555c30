// The write model: one row per order, written by POST /orders in the same transaction as its
// OrderPlaced event. Table: db/schema.sql (TypeORM does not synchronize the schema).
import { Column, CreateDateColumn, Entity, PrimaryColumn } from 'typeorm';

export interface OrderLine {
  sku: string;
  quantity: number;
  unit_price_cents: number;
}

@Entity('orders')
export class Order {
  @PrimaryColumn('uuid')
  id: string;

  @Column('text', { name: 'customer_id' })
  customerId: string;

  @Column('jsonb')
  lines: OrderLine[];

  @Column('integer', { name: 'total_cents' })
  totalCents: number;

  @Column('text')
  status: string;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;
}
