import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { CONFIG, type Config } from './config.js';
import { ConfigModule } from './config.module.js';
import { Order } from './orders/order.entity.js';
import { OrderSummary } from './orders/order-summary.entity.js';
import { OrdersModule } from './orders/orders.module.js';

@Module({
  imports: [
    ConfigModule,
    TypeOrmModule.forRootAsync({
      inject: [CONFIG],
      useFactory: (config: Config) => ({
        type: 'postgres' as const,
        url: config.databaseUrl,
        entities: [Order, OrderSummary],
        // The tables are db/schema.sql's; the read model belongs to the consumer, never to TypeORM.
        synchronize: false,
        extra: { max: 10 },
      }),
    }),
    OrdersModule,
  ],
})
export class AppModule {}
