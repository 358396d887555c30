import { type MiddlewareConsumer, Module, type NestModule, RequestMethod } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Order } from './order.entity.js';
import { OrderSummary } from './order-summary.entity.js';
import { OrdersController } from './orders.controller.js';
import { OrdersService } from './orders.service.js';
import { ReadYourWritesMiddleware } from './read-your-writes.middleware.js';

@Module({
  imports: [TypeOrmModule.forFeature([Order, OrderSummary])],
  controllers: [OrdersController],
  providers: [OrdersService],
})
export class OrdersModule implements NestModule {
  configure(consumer: MiddlewareConsumer): void {
    // Only the read-model route waits for tokens; the write-model routes never need to.
    consumer.apply(ReadYourWritesMiddleware).forRoutes({ path: 'orders/:id/summary', method: RequestMethod.GET });
  }
}
