package io.github.ksharego.javaclients;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;

/**
 * What every scenario shares: the bootstrap address, a run id that makes topic,
 * group and transactional ids unique per run, and the bound on every wait.
 */
final class Env {
    /** Bound on one client call (create topics, commit, alter configs). */
    static final Duration CALL_TIMEOUT = Duration.ofSeconds(30);

    final String bootstrap;
    final String runId;
    final Duration scenarioTimeout;

    Env(String bootstrap, String runId, Duration scenarioTimeout) {
        this.bootstrap = bootstrap;
        this.runId = runId;
        this.scenarioTimeout = scenarioTimeout;
    }

    /** Properties every client starts from. */
    Properties base(String clientId) {
        Properties p = new Properties();
        p.put(CommonClientConfigs.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(CommonClientConfigs.CLIENT_ID_CONFIG, clientId + "-" + runId);
        p.put(CommonClientConfigs.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        return p;
    }

    Admin admin() {
        Properties p = base("kshare-java-admin");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, Long.toString(CALL_TIMEOUT.toMillis()));
        return Admin.create(p);
    }

    /** Creates a topic with replication factor 1 and waits for the answer. */
    void createTopic(Admin admin, String topic, int partitions) throws Exception {
        admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1)))
                .all()
                .get(CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
    }

    /** The instant by which a scenario started now must have finished. */
    Instant deadline() {
        return Instant.now().plus(scenarioTimeout);
    }

    /**
     * Reads every partition of a topic from the beginning up to the end
     * offset the broker reports for the isolation level (the last stable
     * offset for read_committed), without a group, and returns the values by
     * partition.
     */
    Map<Integer, List<String>> readAll(String topic, int partitions, String isolation, Instant deadline)
            throws Mismatch {
        Properties p = base("kshare-java-reader-" + isolation.replace('_', '-'));
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, Long.toString(CALL_TIMEOUT.toMillis()));
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());

        List<TopicPartition> tps = new ArrayList<>();
        Map<Integer, List<String>> seen = new HashMap<>();
        for (int i = 0; i < partitions; i++) {
            tps.add(new TopicPartition(topic, i));
            seen.put(i, new ArrayList<>());
        }
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            consumer.assign(tps);
            consumer.seekToBeginning(tps);
            Map<TopicPartition, Long> end = consumer.endOffsets(tps, CALL_TIMEOUT);
            while (!reached(consumer, tps, end)) {
                if (Instant.now().isAfter(deadline)) {
                    throw new Mismatch(isolation + " consumer did not reach the end offsets " + end
                            + " before the deadline; read so far: " + seen);
                }
                for (ConsumerRecord<String, String> rec : consumer.poll(Duration.ofMillis(200))) {
                    seen.get(rec.partition()).add(rec.value());
                }
            }
        }
        return seen;
    }

    private static boolean reached(KafkaConsumer<String, String> consumer, List<TopicPartition> tps,
            Map<TopicPartition, Long> end) {
        for (TopicPartition tp : tps) {
            if (consumer.position(tp, CALL_TIMEOUT) < end.get(tp)) {
                return false;
            }
        }
        return true;
    }
}
