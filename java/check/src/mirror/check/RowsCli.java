package mirror.check;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.kafka.common.header.internals.RecordHeaders;

/**
 * WindowRows without Kafka or Spark, for the unit tests (tests/unit/jvm_rows.py, tests/unit/spark_jobs/check/test_rdkafka.py): one JSON
 * request per stdin line ({"side", the scope, "records": [[offset, key, value, [[name, value], ...]], ...]},
 * bytes in base64, null as null), one JSON list of rows per stdout line.
 */
public final class RowsCli {
    private static final ObjectMapper JSON = new ObjectMapper();

    private RowsCli() {}

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            out.println(JSON.writeValueAsString(rows(JSON.readTree(line))));
        }
    }

    static List<long[]> rows(JsonNode request) {
        long window = request.get("window").asLong();
        WindowRows.Sink sink;
        if (request.get("side").asText().equals("source")) {
            JsonNode committed = request.get("committed");
            sink = new WindowRows.Source(request.get("t").asLong(), request.get("p").asLong(), window,
                    committed.isNull() ? Long.MAX_VALUE : committed.asLong());
        } else {
            sink = DigestTasks.destination(request.get("scope"), request.get("dp").asLong(), window);
        }
        for (JsonNode r : request.get("records")) {
            sink.add(r.get(0).asLong(), buffer(r.get(1)), buffer(r.get(2)), headers(r.get(3)));
        }
        return sink.rows();
    }

    private static ByteBuffer buffer(JsonNode node) {
        byte[] data = bytes(node);
        if (data == null) {
            return null;
        }
        // Inside a larger array, as the consumer's buffers are: position and limit must be honoured.
        byte[] around = new byte[data.length + 6];
        System.arraycopy(data, 0, around, 3, data.length);
        return ByteBuffer.wrap(around, 3, data.length);
    }

    private static byte[] bytes(JsonNode node) {
        return node == null || node.isNull() ? null : Base64.getDecoder().decode(node.asText());
    }

    private static RecordHeaders headers(JsonNode node) {
        RecordHeaders headers = new RecordHeaders();
        if (node != null && !node.isNull()) {
            for (JsonNode h : node) {
                headers.add(h.get(0).asText(), bytes(h.get(1)));
            }
        }
        return headers;
    }
}
