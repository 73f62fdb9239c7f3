package io.github.ksharego.javaclients;

import java.util.Locale;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.FeatureMetadata;
import org.apache.kafka.clients.admin.FinalizedVersionRange;

/**
 * The broker finalizes the features the other scenarios rely on:
 * share.version of at least 1 (share groups) and transaction.version of at
 * least 2 (TV2 transactions).
 */
final class FeatureScenario implements Scenario {
    @Override
    public String name() {
        return "features";
    }

    @Override
    public String run(Env env) throws Exception {
        FeatureMetadata md;
        try (Admin admin = env.admin()) {
            md = admin.describeFeatures().featureMetadata().get(Env.CALL_TIMEOUT.toMillis(), TimeUnit.MILLISECONDS);
        }
        Map<String, FinalizedVersionRange> finalized = md.finalizedFeatures();
        short share = require(finalized, "share.version", 1);
        short txn = require(finalized, "transaction.version", 2);
        return String.format(Locale.ROOT, "finalized share.version=%d transaction.version=%d", share, txn);
    }

    private static short require(Map<String, FinalizedVersionRange> finalized, String feature, int min)
            throws Mismatch {
        FinalizedVersionRange range = finalized.get(feature);
        if (range == null) {
            throw new Mismatch(feature + " is not finalized; finalized features: " + finalized);
        }
        if (range.maxVersionLevel() < min) {
            throw new Mismatch(String.format(Locale.ROOT,
                    "%s is finalized at %d, want at least %d", feature, range.maxVersionLevel(), min));
        }
        return range.maxVersionLevel();
    }
}
