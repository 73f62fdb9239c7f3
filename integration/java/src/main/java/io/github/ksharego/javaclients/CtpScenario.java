package io.github.ksharego.javaclients;

import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ConsumerGroupDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.GroupType;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Consume-transform-produce with a KafkaConsumer of the KIP-848 protocol
 * (group.protocol=consumer): every batch is transformed inside a transaction
 * that also commits the group's offsets with sendOffsetsToTransaction, and
 * every third transaction aborts (the consumer then rewinds to the committed
 * offsets). A read_committed reader must see one output per input, and the
 * group, described as a consumer-type group, must have committed the input's
 * end offsets.
 */
final class CtpScenario implements Scenario {
    private static final int PARTITIONS = 3;
    private static final int RECORDS = 60;

    @Override
    public String name() {
        return "ctp";
    }

    @Override
    public String run(Env env) throws Exception {
        Instant deadline = env.deadline();
        String in = "kshare-java-ctp-in-" + env.runId;
        String out = "kshare-java-ctp-out-" + env.runId;
        String group = "kshare-java-ctp-" + env.runId;
        try (Admin admin = env.admin()) {
            env.createTopic(admin, in, PARTITIONS);
            env.createTopic(admin, out, PARTITIONS);
        }
        Set<String> inputs = produceInputs(env, in);

        int committedTxns = 0;
        int abortedTxns = 0;
        int maxEpoch = -1;
        Set<String> done = new HashSet<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(consumerProps(env, group));
                KafkaProducer<String, String> producer = new KafkaProducer<>(producerProps(env, group))) {
            consumer.subscribe(List.of(in));
            producer.initTransactions();
            for (int txn = 0; done.size() < RECORDS; ) {
                if (Instant.now().isAfter(deadline)) {
                    throw new Mismatch("the pipeline did not process every input before the deadline: " + done.size()
                            + " of " + RECORDS);
                }
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) {
                    continue;
                }
                producer.beginTransaction();
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                List<String> seen = new ArrayList<>();
                for (ConsumerRecord<String, String> rec : records) {
                    producer.send(new ProducerRecord<>(out, rec.key(), "out:" + rec.value()));
                    offsets.put(new TopicPartition(rec.topic(), rec.partition()), new OffsetAndMetadata(rec.offset() + 1));
                    seen.add(rec.value());
                }
                ConsumerGroupMetadata meta = consumer.groupMetadata();
                maxEpoch = Math.max(maxEpoch, meta.generationId());
                producer.sendOffsetsToTransaction(offsets, meta);
                if (++txn % 3 == 0) {
                    producer.abortTransaction();
                    abortedTxns++;
                    rewind(consumer, offsets.keySet());
                    continue;
                }
                producer.commitTransaction();
                committedTxns++;
                for (String v : seen) {
                    if (!done.add(v)) {
                        throw new Mismatch("input " + v + " was committed in two transactions");
                    }
                }
            }
        }
        if (!done.equals(inputs)) {
            throw new Mismatch("processed " + done + ", want " + inputs);
        }
        if (maxEpoch <= 0) {
            throw new Mismatch("sendOffsetsToTransaction never carried a member epoch: " + maxEpoch);
        }

        List<String> outputs = new ArrayList<>();
        env.readAll(out, PARTITIONS, "read_committed", deadline).values().forEach(outputs::addAll);
        List<String> want = new ArrayList<>();
        for (String v : inputs) {
            want.add("out:" + v);
        }
        if (outputs.size() != want.size() || !new HashSet<>(outputs).equals(new HashSet<>(want))) {
            throw new Mismatch("read_committed output " + outputs + ", want one of each of " + want);
        }
        checkGroup(env, group, in);
        return String.format(Locale.ROOT,
                "group.protocol=consumer: %d inputs in %d committed and %d aborted transactions (member epoch up to %d); "
                        + "read_committed saw one output per input; the consumer group committed the input's end offsets",
                RECORDS, committedTxns, abortedTxns, maxEpoch);
    }

    private static Set<String> produceInputs(Env env, String topic) throws Exception {
        Properties p = env.base("kshare-java-ctp-input");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        Set<String> values = new HashSet<>();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < RECORDS; i++) {
                String v = "c" + i;
                producer.send(new ProducerRecord<>(topic, i % PARTITIONS, v, v))
                        .get(Env.CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
                values.add(v);
            }
        }
        return values;
    }

    private static Properties consumerProps(Env env, String group) {
        Properties p = env.base("kshare-java-ctp-consumer");
        p.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        p.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, "consumer");
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        p.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, "7");
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, Long.toString(Env.CALL_TIMEOUT.toMillis()));
        p.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        p.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        return p;
    }

    private static Properties producerProps(Env env, String group) {
        Properties p = env.base("kshare-java-ctp-producer");
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, group + "-txn");
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, Long.toString(Env.CALL_TIMEOUT.toMillis()));
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, Long.toString(Env.CALL_TIMEOUT.toMillis()));
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        return p;
    }

    /** After an abort, continues from the committed offsets (the start when none). */
    private static void rewind(KafkaConsumer<String, String> consumer, Set<TopicPartition> partitions) {
        Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(partitions, Env.CALL_TIMEOUT);
        for (TopicPartition tp : partitions) {
            OffsetAndMetadata at = committed.get(tp);
            if (at == null) {
                consumer.seekToBeginning(List.of(tp));
            } else {
                consumer.seek(tp, at.offset());
            }
        }
    }

    /** The group is a consumer-type group that committed the input's end offsets. */
    private static void checkGroup(Env env, String group, String in) throws Exception {
        try (Admin admin = env.admin()) {
            ConsumerGroupDescription d = admin.describeConsumerGroups(List.of(group))
                    .describedGroups()
                    .get(group)
                    .get(Env.CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            if (d.type() != GroupType.CONSUMER) {
                throw new Mismatch("group " + group + " is of type " + d.type() + ", want CONSUMER");
            }
            Map<TopicPartition, OffsetAndMetadata> offsets = admin.listConsumerGroupOffsets(group)
                    .partitionsToOffsetAndMetadata()
                    .get(Env.CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
            for (int p = 0; p < PARTITIONS; p++) {
                OffsetAndMetadata at = offsets.get(new TopicPartition(in, p));
                long want = RECORDS / PARTITIONS;
                if (at == null || at.offset() != want) {
                    throw new Mismatch(String.format(Locale.ROOT,
                            "committed offset of %s-%d is %s, want %d", in, p, at, want));
                }
            }
        }
    }
}
