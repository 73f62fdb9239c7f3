package io.github.ksharego.javaclients;

import java.time.Duration;
import java.time.Instant;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidConfigurationException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A KafkaShareConsumer in explicit acknowledgement mode reads freshly produced
 * records, accepts most, releases one (which must come back with delivery count
 * 2), rejects one (which must never come back) and renews the lock of one
 * (KIP-1222) for longer than the group's acquisition lock lasts before it
 * accepts it: the renewed record must never be delivered again by the broker
 * (its delivery count stays 1) and the final accept must succeed.
 */
final class ShareScenario implements Scenario {
    private static final int RECORDS = 10;
    private static final String RELEASED = value(3);
    private static final String REJECTED = value(6);
    private static final String RENEWED = value(8);
    /**
     * The acquisition lock the scenario asks for, and the one it falls back to
     * on a broker whose bounds refuse it (Kafka's default minimum). Six
     * seconds, not two: on a loaded CI machine (two cores shared with a
     * broker, this JVM and race-enabled Go tests) a 2 s lock once lapsed
     * between two renewals, and the final acknowledgement was refused with
     * INVALID_RECORD_STATE.
     */
    private static final List<Integer> LOCK_MS = List.of(6000, 15000);
    /** How long the renewed record is "processed" between renewals. */
    private static final Duration RENEW_EVERY = Duration.ofMillis(200);
    /** How long nothing may arrive once every record has been acknowledged. */
    private static final Duration QUIET_PERIOD = Duration.ofSeconds(3);

    @Override
    public String name() {
        return "share";
    }

    private static String value(int i) {
        return "s" + i;
    }

    @Override
    public String run(Env env) throws Exception {
        Instant deadline = env.deadline();
        String topic = "kshare-java-share-" + env.runId;
        String group = topic;
        try (Admin admin = env.admin()) {
            env.createTopic(admin, topic, 1);
            // Without this the group starts at the log end and sees nothing of
            // what was produced before it joined.
            ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
            AlterConfigOp op = new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"),
                    AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(resource, List.of(op)))
                    .all()
                    .get(Env.CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            shortenLock(admin, resource);
        }
        produce(env, topic);

        State state = new State();
        try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(consumerProps(env, group))) {
            consumer.subscribe(List.of(topic));
            while (!state.done()) {
                if (Instant.now().isAfter(deadline)) {
                    throw new Mismatch("share consumer did not finish before the deadline: " + state);
                }
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
                if (records.isEmpty()) {
                    continue;
                }
                for (ConsumerRecord<String, String> rec : records) {
                    consumer.acknowledge(rec, state.decide(rec, consumer.acquisitionLockTimeoutMs()));
                }
                checkCommit(consumer.commitSync(Env.CALL_TIMEOUT));
            }
            Instant quietUntil = Instant.now().plus(QUIET_PERIOD);
            while (Instant.now().isBefore(quietUntil)) {
                ConsumerRecords<String, String> late = consumer.poll(Duration.ofMillis(500));
                if (!late.isEmpty()) {
                    ConsumerRecord<String, String> rec = late.iterator().next();
                    throw new Mismatch(String.format(Locale.ROOT,
                            "record %s (offset %d, delivery count %s) was delivered again after every record was acknowledged%s",
                            rec.value(), rec.offset(), rec.deliveryCount().map(String::valueOf).orElse("none"),
                            rec.value().equals(REJECTED) ? "; it had been rejected" : ""));
                }
            }
        }
        return String.format(Locale.ROOT,
                "explicit mode: %d records; accepted %d, released %s (redelivered with delivery count 2, then accepted), "
                        + "rejected %s (never redelivered), renewed %s %d times over %d ms, longer than its %d ms lock (never redelivered, then accepted)",
                RECORDS, state.accepted.size(), RELEASED, REJECTED, RENEWED, state.renewals,
                state.renewedFor.toMillis(), state.lockMs);
    }

    /**
     * Asks for a short acquisition lock so that renewing past it is quick; a
     * broker whose bounds refuse it gets the next value, and the broker's
     * default stays if every value is refused.
     */
    private static void shortenLock(Admin admin, ConfigResource resource) throws Exception {
        for (int ms : LOCK_MS) {
            AlterConfigOp op = new AlterConfigOp(
                    new ConfigEntry("share.record.lock.duration.ms", Integer.toString(ms)), AlterConfigOp.OpType.SET);
            try {
                admin.incrementalAlterConfigs(Map.of(resource, List.of(op)))
                        .all()
                        .get(Env.CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
                return;
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof InvalidConfigurationException)) {
                    throw e;
                }
            }
        }
    }

    private static void produce(Env env, String topic) throws Exception {
        Properties p = env.base("kshare-java-share-producer");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, Long.toString(Env.CALL_TIMEOUT.toMillis()));
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, Long.toString(Env.CALL_TIMEOUT.toMillis()));
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < RECORDS; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, value(i)))
                        .get(Env.CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            }
        }
    }

    private static Properties consumerProps(Env env, String group) {
        Properties p = env.base("kshare-java-share-consumer");
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.SHARE_ACKNOWLEDGEMENT_MODE_CONFIG, "explicit");
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return p;
    }

    private static void checkCommit(Map<TopicIdPartition, Optional<KafkaException>> result) throws Mismatch {
        for (Map.Entry<TopicIdPartition, Optional<KafkaException>> e : result.entrySet()) {
            if (e.getValue().isPresent()) {
                throw new Mismatch("committing acknowledgements for " + e.getKey() + " failed: " + e.getValue().get());
            }
        }
    }

    /** What has been seen and decided so far; decide() enforces the delivery rules. */
    private static final class State {
        final Set<String> accepted = new HashSet<>();
        boolean released;
        boolean rejected;
        /** When the renewed record was first renewed; null before. */
        Instant renewedSince;
        int renewals;
        Duration renewedFor = Duration.ZERO;
        long lockMs;

        boolean done() {
            return rejected && accepted.size() == RECORDS - 1;
        }

        AcknowledgeType decide(ConsumerRecord<String, String> rec, Optional<Integer> lockTimeout) throws Mismatch {
            String v = rec.value();
            short count = rec.deliveryCount()
                    .orElseThrow(() -> new Mismatch("record " + v + " carries no delivery count"));
            if (accepted.contains(v)) {
                throw new Mismatch("accepted record " + v + " was delivered again with delivery count " + count);
            }
            if (v.equals(RENEWED)) {
                // The client hands a renewed record back on a later poll with
                // the same delivery count; a broker that let the lock lapse
                // would deliver it again with count 2.
                expectCount(v + " (renewed " + renewals + " times)", count, 1);
                lockMs = lockTimeout.orElseThrow(() -> new Mismatch("the consumer knows no acquisition lock timeout"));
                Instant now = Instant.now();
                if (renewedSince == null) {
                    renewedSince = now;
                }
                renewedFor = Duration.between(renewedSince, now);
                if (renewedFor.toMillis() <= 2 * lockMs) {
                    renewals++;
                    sleep(RENEW_EVERY); // still processing
                    return AcknowledgeType.RENEW;
                }
                accepted.add(v);
                return AcknowledgeType.ACCEPT;
            }
            if (v.equals(REJECTED)) {
                if (rejected) {
                    throw new Mismatch("rejected record " + v + " came back with delivery count " + count);
                }
                expectCount(v, count, 1);
                rejected = true;
                return AcknowledgeType.REJECT;
            }
            if (v.equals(RELEASED) && !released) {
                expectCount(v, count, 1);
                released = true;
                return AcknowledgeType.RELEASE;
            }
            if (v.equals(RELEASED)) {
                expectCount(v + " (after its release)", count, 2);
            } else if (v.matches("s[0-9]+") && Integer.parseInt(v.substring(1)) < RECORDS) {
                expectCount(v, count, 1);
            } else {
                throw new Mismatch("unexpected record value " + v + " at offset " + rec.offset());
            }
            accepted.add(v);
            return AcknowledgeType.ACCEPT;
        }

        private static void sleep(Duration d) throws Mismatch {
            try {
                Thread.sleep(d.toMillis());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new Mismatch("interrupted while holding the renewed record");
            }
        }

        private static void expectCount(String what, short got, int want) throws Mismatch {
            if (got != want) {
                throw new Mismatch("record " + what + ": want delivery count " + want + ", got " + got);
            }
        }

        @Override
        public String toString() {
            return "accepted=" + accepted + " released=" + released + " rejected=" + rejected + " renewals=" + renewals;
        }
    }
}
