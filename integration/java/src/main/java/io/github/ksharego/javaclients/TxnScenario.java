package io.github.ksharego.javaclients;

import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A transactional KafkaProducer writes several transactions that alternately
 * commit and abort. A read_committed KafkaConsumer must see exactly the
 * committed records, in order, per partition; a read_uncommitted one must see
 * the aborted records too, which proves they reached the log and were filtered
 * by the transaction markers rather than never written.
 */
final class TxnScenario implements Scenario {
    private static final int PARTITIONS = 3;
    private static final int TRANSACTIONS = 6;
    private static final int RECORDS_PER_TRANSACTION = 9;

    @Override
    public String name() {
        return "txn";
    }

    @Override
    public String run(Env env) throws Exception {
        Instant deadline = env.deadline();
        String topic = "kshare-java-txn-" + env.runId;
        try (Admin admin = env.admin()) {
            env.createTopic(admin, topic, PARTITIONS);
        }

        Map<Integer, List<String>> committed = perPartition();
        Map<Integer, List<String>> written = perPartition();

        try (KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps(env, topic))) {
            producer.initTransactions();
            for (int t = 0; t < TRANSACTIONS; t++) {
                boolean commit = t % 2 == 0;
                producer.beginTransaction();
                Map<Integer, List<String>> inTransaction = perPartition();
                for (int r = 0; r < RECORDS_PER_TRANSACTION; r++) {
                    int partition = r % PARTITIONS;
                    String value = String.format(Locale.ROOT, "t%d-r%d-%s", t, r, commit ? "commit" : "abort");
                    producer.send(new ProducerRecord<>(topic, partition, "t" + t, value));
                    written.get(partition).add(value);
                    inTransaction.get(partition).add(value);
                }
                if (commit) {
                    producer.commitTransaction();
                    inTransaction.forEach((partition, values) -> committed.get(partition).addAll(values));
                } else {
                    // Flush first so that the aborted records are really in the
                    // log and the abort marker is what hides them.
                    producer.flush();
                    producer.abortTransaction();
                }
            }
        }

        Map<Integer, List<String>> readCommitted = env.readAll(topic, PARTITIONS, "read_committed", deadline);
        compare("read_committed", committed, readCommitted);
        Map<Integer, List<String>> readUncommitted = env.readAll(topic, PARTITIONS, "read_uncommitted", deadline);
        compare("read_uncommitted", written, readUncommitted);

        int committedCount = committed.values().stream().mapToInt(List::size).sum();
        return String.format(Locale.ROOT,
                "%d transactions (%d committed, %d aborted) on %d partitions: read_committed saw exactly the %d committed records in order",
                TRANSACTIONS, (TRANSACTIONS + 1) / 2, TRANSACTIONS / 2, PARTITIONS, committedCount);
    }

    private static Properties producerProps(Env env, String topic) {
        Properties p = env.base("kshare-java-txn-producer");
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, topic);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, Long.toString(Env.CALL_TIMEOUT.toMillis()));
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, Long.toString(Env.CALL_TIMEOUT.toMillis()));
        p.put(ProducerConfig.TRANSACTION_TIMEOUT_CONFIG, "60000");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return p;
    }

    private static Map<Integer, List<String>> perPartition() {
        Map<Integer, List<String>> m = new HashMap<>();
        for (int p = 0; p < PARTITIONS; p++) {
            m.put(p, new ArrayList<>());
        }
        return m;
    }

    private static void compare(String isolation, Map<Integer, List<String>> want, Map<Integer, List<String>> got)
            throws Mismatch {
        for (int p = 0; p < PARTITIONS; p++) {
            if (!want.get(p).equals(got.get(p))) {
                throw new Mismatch(String.format(Locale.ROOT,
                        "%s consumer, partition %d: want %s, got %s", isolation, p, want.get(p), got.get(p)));
            }
        }
    }
}
