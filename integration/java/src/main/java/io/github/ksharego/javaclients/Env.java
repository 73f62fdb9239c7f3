package io.github.ksharego.javaclients;

import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;

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
}
