// The Debezium peer of the benchmark's relay scenario (e2e/src/bench/relay.rs): the embedded
// engine with the PostgreSQL connector (pgoutput) and the outbox EventRouter, publishing what the
// router emits to Kafka with a KafkaProducer, the way Debezium Server's Kafka sink does. Compiled
// by the harness with javac against the jars of pom.xml beside it; nothing else is built.
//
//   java -cp 'LIBS/*:CLASSES' DebeziumRelay relay.properties
//
// relay.properties holds the engine's and the connector's properties; those starting with
// `producer.` configure the KafkaProducer (the prefix removed).
//
// Delivery is at least once, as highwater's: a batch is sent, flushed, and every send checked
// before its records are marked processed, so the replication slot's confirmed position (the
// engine's offset) only moves past records Kafka acknowledged.

import io.debezium.embedded.Connect;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.RecordChangeEvent;
import io.debezium.engine.format.ChangeEventFormat;
import java.io.FileReader;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.connect.header.Header;
import org.apache.kafka.connect.source.SourceRecord;

public final class DebeziumRelay {
    // After the EventRouter the key is the aggregate id, the value the payload column's JSON text
    // and the headers strings (the event id, the type): their text is what goes to Kafka, as
    // highwater's sink sends the payload's JSON text.
    private static byte[] bytes(Object o) {
        return o == null ? null : o.toString().getBytes(StandardCharsets.UTF_8);
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 1) {
            System.err.println("usage: DebeziumRelay relay.properties");
            System.exit(2);
        }
        Properties all = new Properties();
        try (Reader r = new FileReader(args[0], StandardCharsets.UTF_8)) {
            all.load(r);
        }
        Properties engine = new Properties();
        Properties producerProps = new Properties();
        for (String k : all.stringPropertyNames()) {
            if (k.startsWith("producer.")) {
                producerProps.setProperty(k.substring("producer.".length()), all.getProperty(k));
            } else {
                engine.setProperty(k, all.getProperty(k));
            }
        }
        producerProps.put("key.serializer", ByteArraySerializer.class.getName());
        producerProps.put("value.serializer", ByteArraySerializer.class.getName());
        KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(producerProps);

        DebeziumEngine.ChangeConsumer<RecordChangeEvent<SourceRecord>> publish = (batch, committer) -> {
            List<Future<RecordMetadata>> sent = new ArrayList<>(batch.size());
            for (RecordChangeEvent<SourceRecord> e : batch) {
                SourceRecord r = e.record();
                if (r.value() == null) {
                    continue; // a tombstone: the outbox only ever sees inserts
                }
                ProducerRecord<byte[], byte[]> rec =
                        new ProducerRecord<>(r.topic(), null, bytes(r.key()), bytes(r.value()));
                for (Header h : r.headers()) {
                    rec.headers().add(h.key(), bytes(h.value()));
                }
                sent.add(producer.send(rec));
            }
            producer.flush();
            try {
                for (Future<RecordMetadata> f : sent) {
                    f.get();
                }
            } catch (java.util.concurrent.ExecutionException ex) {
                // Not marked processed: the engine stops and the slot keeps these records.
                throw new RuntimeException("a record was not acknowledged by Kafka", ex.getCause());
            }
            for (RecordChangeEvent<SourceRecord> e : batch) {
                committer.markProcessed(e);
            }
            committer.markBatchFinished();
        };

        DebeziumEngine<RecordChangeEvent<SourceRecord>> dbz =
                DebeziumEngine.create(ChangeEventFormat.of(Connect.class))
                        .using(engine)
                        .using(new DebeziumEngine.ConnectorCallback() {
                            @Override
                            public void taskStarted() {
                                System.out.println("debezium relay: task started");
                                System.out.flush();
                            }
                        })
                        .using((success, message, error) -> {
                            System.out.println("debezium relay: engine stopped: success=" + success + " " + message);
                            if (error != null) {
                                error.printStackTrace();
                            }
                            System.out.flush();
                            // The harness sees the exit instead of a relay that silently stopped.
                            Runtime.getRuntime().halt(success ? 0 : 1);
                        })
                        .notifying(publish)
                        .build();
        ExecutorService run = Executors.newSingleThreadExecutor();
        run.execute(dbz);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                dbz.close();
            } catch (Exception ignored) {
                // shutting down anyway
            }
            producer.close();
        }));
    }
}
