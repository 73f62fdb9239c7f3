package io.github.ksharego.javaclients;

/** One check of a broker with the reference clients. */
interface Scenario {
    /** The name used on the command line and in the summary. */
    String name();

    /**
     * Runs the check against the broker described by env.
     *
     * @return a one-line description of what was verified
     * @throws Mismatch when the broker's behaviour differs from Kafka's
     * @throws Exception when a client call fails or a bounded wait runs out
     */
    String run(Env env) throws Exception;
}
