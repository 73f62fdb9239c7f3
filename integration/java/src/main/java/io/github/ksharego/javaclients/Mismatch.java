package io.github.ksharego.javaclients;

/**
 * A broker answered differently from what Apache Kafka's semantics require.
 * Its message names the scenario check that failed and both values.
 */
final class Mismatch extends Exception {
    private static final long serialVersionUID = 1L;

    Mismatch(String message) {
        super(message);
    }
}
