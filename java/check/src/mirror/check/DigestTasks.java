package mirror.check;

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteBufferDeserializer;
import org.apache.spark.api.java.JavaSparkContext;
import org.apache.spark.api.java.function.FlatMapFunction;

/**
 * The digest pass read on the JVM (spark_jobs/check/jvm.py is the Python side): Spark runs one task per
 * (side, partition, offset range); each task reads its range with one Kafka Java consumer, hashes every
 * record (RecordDigest) and returns only its rows per window (WindowRows), compared on the Python driver.
 *
 * Why: a record costs the Python reader about 2 microseconds of interpreter time per side; here it is a
 * fraction of that, so the pass is bounded by the brokers and the fixed costs, not by the hashing.
 */
public final class DigestTasks {
    private static final ObjectMapper JSON = new ObjectMapper();

    private DigestTasks() {}

    /**
     * Runs `tasks` (a JSON list of [side, topic, partition, start, end]) as one Spark job with `settings`
     * (JSON, see spark_jobs/check/jvm.py) and returns {"source": rows, "destination": rows, "task":
     * [[seconds, cpu seconds], ...]} as JSON. A task that cannot read its whole range fails (Spark retries it).
     */
    public static String run(JavaSparkContext context, String tasks, String settings) throws Exception {
        List<String> items = new ArrayList<>();
        for (JsonNode task : JSON.readTree(tasks)) {
            items.add(JSON.writeValueAsString(task));
        }
        ObjectNode out = JSON.createObjectNode();
        ArrayNode source = out.putArray("source"), destination = out.putArray("destination"), stats = out.putArray("task");
        if (items.isEmpty()) {
            return JSON.writeValueAsString(out);
        }
        List<String> results = context.parallelize(items, items.size()).mapPartitions(new ReadAll(settings)).collect();
        for (String result : results) {
            JsonNode node = JSON.readTree(result);
            (node.get("side").asText().equals("source") ? source : destination).addAll((ArrayNode) node.get("rows"));
            stats.add(node.get("task"));
        }
        return JSON.writeValueAsString(out);
    }

    /** The Spark function: each task's JSON in, one JSON result (side, rows, task times) out. */
    static final class ReadAll implements FlatMapFunction<Iterator<String>, String> {
        private final String settings;

        ReadAll(String settings) {
            this.settings = settings;
        }

        @Override
        public Iterator<String> call(Iterator<String> tasks) throws Exception {
            JsonNode config = JSON.readTree(settings);
            List<String> out = new ArrayList<>();
            while (tasks.hasNext()) {
                out.add(readTask(JSON.readTree(tasks.next()), config));
            }
            return out.iterator();
        }
    }

    static String readTask(JsonNode task, JsonNode config) throws Exception {
        ThreadMXBean threads = ManagementFactory.getThreadMXBean();
        long started = System.nanoTime(), cpu = threads.getCurrentThreadCpuTime();
        String side = task.get(0).asText(), topic = task.get(1).asText();
        int partition = task.get(2).asInt();
        long start = task.get(3).asLong(), end = task.get(4).asLong();
        Properties props = new Properties();
        config.get("consumers").get(side).properties().forEach(e -> props.put(e.getKey(), e.getValue().asText()));
        WindowRows.Sink sink = sink(side, topic, partition, config);
        read(props, topic, partition, start, end, config.get("stall_timeout_s").asLong(),
             r -> sink.add(r.offset(), r.key(), r.value(), r.headers()));
        List<long[]> rows = sink.rows();
        ObjectNode result = JSON.createObjectNode();
        result.put("side", side);
        ArrayNode array = result.putArray("rows");
        for (long[] row : rows) {
            ArrayNode a = array.addArray();
            for (long v : row) {
                a.add(v);
            }
        }
        result.putArray("task").add((System.nanoTime() - started) / 1e9).add((threads.getCurrentThreadCpuTime() - cpu) / 1e9);
        return JSON.writeValueAsString(result);
    }

    /** The rows of one side's partition, from the pass's settings (the same JSON shapes as RowsCli's requests). */
    static WindowRows.Sink sink(String side, String topic, int partition, JsonNode config) {
        long window = config.get("window").asLong();
        if (side.equals("source")) {
            JsonNode committed = config.get("committed").get(topic + ":" + partition);
            return new WindowRows.Source(indexOf(config.get("topics"), topic), partition, window,
                    committed == null || committed.isNull() ? Long.MAX_VALUE : committed.asLong());
        }
        return destination(config.get("scopes").get(topic), partition, window);
    }

    /** A destination partition's rows for `scope` ({"t", "source_topic", "cluster_id", "ranges": [[p, from, to]]}). */
    static WindowRows.Destination destination(JsonNode scope, long partition, long window) {
        Map<Long, long[]> ranges = new HashMap<>();
        for (JsonNode range : scope.get("ranges")) {
            ranges.put(range.get(0).asLong(), new long[] {range.get(1).asLong(), range.get(2).asLong()});
        }
        JsonNode cluster = scope.get("cluster_id");
        return new WindowRows.Destination(scope.get("t").asLong(), partition, window, scope.get("source_topic").asText(),
                cluster == null || cluster.isNull() ? null : cluster.asText(), ranges);
    }

    interface RecordSink {
        void accept(ConsumerRecord<ByteBuffer, ByteBuffer> record);
    }

    /**
     * Feeds the records of [start, end) to `sink` in offset order, as the consumer delivers them (under
     * read_committed, aborted records and transaction markers have offsets but are never delivered: the
     * consumer's position steps over them). Fails after `stallTimeoutS` seconds without progress.
     */
    static void read(Properties props, String topic, int partition, long start, long end, long stallTimeoutS,
                     RecordSink sink) {
        TopicPartition tp = new TopicPartition(topic, partition);
        try (KafkaConsumer<ByteBuffer, ByteBuffer> consumer = new KafkaConsumer<>(props, new ByteBufferDeserializer(), new ByteBufferDeserializer())) {
            consumer.assign(List.of(tp));
            consumer.seek(tp, start);
            long position = start, stalledAt = System.nanoTime() + stallTimeoutS * 1_000_000_000L;
            while (position < end) {
                ConsumerRecords<ByteBuffer, ByteBuffer> records = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<ByteBuffer, ByteBuffer> record : records.records(tp)) {
                    if (record.offset() >= end) {
                        break;
                    }
                    sink.accept(record);
                }
                long now = consumer.position(tp);
                if (now > position) {
                    position = now;
                    stalledAt = System.nanoTime() + stallTimeoutS * 1_000_000_000L;
                } else if (System.nanoTime() > stalledAt) {
                    throw new IllegalStateException(topic + "[" + partition + "]: nothing read for " + stallTimeoutS
                            + "s at offset " + position + ", range end " + end);
                }
            }
        }
    }

    private static long indexOf(JsonNode topics, String topic) {
        for (int i = 0; i < topics.size(); i++) {
            if (topics.get(i).asText().equals(topic)) {
                return i;
            }
        }
        throw new IllegalArgumentException("topic " + topic + " is not a checked topic");
    }
}
