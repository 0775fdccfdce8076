package dev.mongoose.peer;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.processor.api.RecordMetadata;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The ledger of Mongoose-rs (mongoose-ledger) as a Kafka Streams application, the peer of
 * {@code cargo mongoose-bench versus-kafka-streams}.
 *
 * <p>Input lines {@code account,amount} (the record's value; the key is the account, as the
 * producer partitions by it). For each line: a malformed one (or one that would overflow the
 * balance) is counted under the store key {@code #rejected}, not applied; otherwise the
 * account's balance in the store {@code balances} (persistent, RocksDB, logged to its
 * changelog topic {@code <application id>-balances-changelog}) is updated, and when it is
 * negative afterwards the alert {@code position,account,balance} goes to the alerts topic,
 * keyed by the account. {@code position} is written as ours writes a Kafka feed's: the input
 * offset + 1, prefixed by {@code partition:} unless the partition is 0. Processing is
 * {@code exactly_once_v2}: the store's changelog, the alerts and the input offsets commit in
 * one transaction.
 *
 * <p>Arguments: {@code --brokers B --app-id A --input T --alerts T --state-dir D}. It prints
 * {@code state RUNNING} (and every other state change) to stderr and runs until SIGTERM.
 */
public final class LedgerStreams {
    /** The store of balances (and the rejected count). */
    static final String STORE = "balances";
    /** The store key of the rejected count (an account never holds {@code #}). */
    static final String REJECTED = "#rejected";

    private LedgerStreams() {}

    /** One line applied to the store; forwards the alert of a negative balance. */
    static final class Ledger implements Processor<String, String, String, String> {
        private ProcessorContext<String, String> context;
        private KeyValueStore<String, Long> balances;

        @Override
        public void init(ProcessorContext<String, String> context) {
            this.context = context;
            this.balances = context.getStateStore(STORE);
        }

        @Override
        public void process(Record<String, String> record) {
            String line = record.value();
            int comma = line == null ? -1 : line.indexOf(',');
            if (comma < 0) {
                reject();
                return;
            }
            String account = line.substring(0, comma);
            if (!validAccount(account)) {
                reject();
                return;
            }
            long amount;
            try {
                amount = Long.parseLong(line.substring(comma + 1).stripTrailing());
            } catch (NumberFormatException malformed) {
                reject();
                return;
            }
            Long saved = balances.get(account);
            long updated;
            try {
                updated = Math.addExact(saved == null ? 0 : saved, amount);
            } catch (ArithmeticException overflow) {
                reject();
                return;
            }
            balances.put(account, updated);
            if (updated < 0) {
                RecordMetadata metadata = context.recordMetadata().orElseThrow();
                long after = metadata.offset() + 1;
                String position =
                        metadata.partition() == 0 ? Long.toString(after) : metadata.partition() + ":" + after;
                context.forward(record.withKey(account).withValue(position + "," + account + "," + updated));
            }
        }

        private void reject() {
            Long rejected = balances.get(REJECTED);
            balances.put(REJECTED, rejected == null ? 1 : rejected + 1);
        }

        /** 1 to 64 of A-Z a-z 0-9 _ -, as ours. */
        static boolean validAccount(String account) {
            if (account.isEmpty() || account.length() > 64) {
                return false;
            }
            for (int at = 0; at < account.length(); at++) {
                char c = account.charAt(at);
                boolean ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
                        || c == '_' || c == '-';
                if (!ok) {
                    return false;
                }
            }
            return true;
        }
    }

    private static Map<String, String> arguments(String[] args) {
        Map<String, String> parsed = new HashMap<>();
        for (int at = 0; at + 1 < args.length; at += 2) {
            parsed.put(args[at], args[at + 1]);
        }
        for (String required : new String[] {"--brokers", "--app-id", "--input", "--alerts", "--state-dir"}) {
            if (!parsed.containsKey(required)) {
                System.err.println("usage: LedgerStreams --brokers B --app-id A --input T --alerts T --state-dir D"
                        + " (missing " + required + ")");
                System.exit(2);
            }
        }
        return parsed;
    }

    public static void main(String[] args) throws InterruptedException {
        Map<String, String> arguments = arguments(args);
        Properties properties = new Properties();
        properties.put(StreamsConfig.APPLICATION_ID_CONFIG, arguments.get("--app-id"));
        properties.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, arguments.get("--brokers"));
        properties.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        properties.put(StreamsConfig.STATE_DIR_CONFIG, arguments.get("--state-dir"));
        properties.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        // as ours is configured in the bench: a member gone 6 s is out of the group
        properties.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), "6000");
        properties.put(StreamsConfig.consumerPrefix(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG), "2000");

        StreamsBuilder builder = new StreamsBuilder();
        // logged (the changelog topic) and not cached: every update is in the changelog
        builder.addStateStore(Stores.keyValueStoreBuilder(
                Stores.persistentKeyValueStore(STORE), Serdes.String(), Serdes.Long()));
        builder.stream(arguments.get("--input"), Consumed.with(Serdes.String(), Serdes.String()))
                .process(Ledger::new, STORE)
                .to(arguments.get("--alerts"), Produced.with(Serdes.String(), Serdes.String()));

        KafkaStreams streams = new KafkaStreams(builder.build(), properties);
        CountDownLatch stopped = new CountDownLatch(1);
        AtomicBoolean failed = new AtomicBoolean();
        streams.setStateListener((now, before) -> {
            System.err.println("state " + now);
            if (now == KafkaStreams.State.ERROR) {
                failed.set(true);
            }
            if (now == KafkaStreams.State.NOT_RUNNING || now == KafkaStreams.State.ERROR) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(error -> {
            System.err.println("failed: " + error);
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(30));
            stopped.countDown();
        }));
        streams.start();
        stopped.await();
        if (failed.get()) {
            System.exit(1);
        }
    }
}
