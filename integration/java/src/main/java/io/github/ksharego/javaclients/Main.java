package io.github.ksharego.javaclients;

import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;

/**
 * Checks a Kafka-compatible broker with the Apache Kafka Java clients.
 *
 * <pre>
 * java -jar kshare-javaclients.jar BOOTSTRAP [--timeout-seconds N] [features|txn|share|ctp ...]
 * </pre>
 *
 * With no scenario named, all run. Each prints PASS or FAIL with what it
 * checked; the process exits 0 only when every scenario passed, 1 when any
 * failed, 2 on bad usage.
 */
public final class Main {
    private Main() {}

    public static void main(String[] args) {
        // The clients log through SLF4J; keep their chatter to warnings unless
        // the caller asks for more with -Dorg.slf4j.simpleLogger.defaultLogLevel.
        if (System.getProperty("org.slf4j.simpleLogger.defaultLogLevel") == null) {
            System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        }
        System.exit(run(args));
    }

    private static int run(String[] args) {
        Map<String, Scenario> known = new LinkedHashMap<>();
        for (Scenario s : List.of(new FeatureScenario(), new TxnScenario(), new ShareScenario(), new CtpScenario())) {
            known.put(s.name(), s);
        }
        String bootstrap = null;
        Duration timeout = Duration.ofSeconds(90);
        List<Scenario> chosen = new ArrayList<>();
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            if (a.equals("--timeout-seconds")) {
                if (i + 1 >= args.length) {
                    return usage("--timeout-seconds needs a value");
                }
                try {
                    timeout = Duration.ofSeconds(Long.parseLong(args[++i]));
                } catch (NumberFormatException e) {
                    return usage("bad --timeout-seconds value " + args[i]);
                }
                if (timeout.isNegative() || timeout.isZero()) {
                    return usage("--timeout-seconds must be positive");
                }
            } else if (a.startsWith("-")) {
                return usage("unknown option " + a);
            } else if (bootstrap == null) {
                bootstrap = a;
            } else if (known.containsKey(a)) {
                chosen.add(known.get(a));
            } else {
                return usage("unknown scenario " + a + "; known: " + known.keySet());
            }
        }
        if (bootstrap == null || bootstrap.isBlank()) {
            return usage("missing BOOTSTRAP (host:port)");
        }
        if (chosen.isEmpty()) {
            chosen.addAll(known.values());
        }

        Env env = new Env(bootstrap, UUID.randomUUID().toString().substring(0, 8), timeout);
        System.out.println("javaclients: bootstrap=" + bootstrap + " run=" + env.runId);
        List<String> failed = new ArrayList<>();
        for (Scenario s : chosen) {
            try {
                System.out.println("PASS " + s.name() + ": " + s.run(env));
            } catch (Mismatch m) {
                failed.add(s.name());
                System.out.println("FAIL " + s.name() + ": mismatch: " + m.getMessage());
            } catch (Exception e) {
                failed.add(s.name());
                System.out.println("FAIL " + s.name() + ": error: " + e);
                e.printStackTrace(System.out);
            }
        }
        System.out.printf("javaclients summary: %d scenarios, failed %s%n", chosen.size(),
                failed.isEmpty() ? "none" : String.join(",", failed));
        return failed.isEmpty() ? 0 : 1;
    }

    private static int usage(String problem) {
        System.err.println("javaclients: " + problem);
        System.err.println(
                "usage: java -jar kshare-javaclients.jar BOOTSTRAP [--timeout-seconds N] [features|txn|share|ctp ...]");
        return 2;
    }
}
