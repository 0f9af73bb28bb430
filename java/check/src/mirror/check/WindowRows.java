package mirror.check;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;

/**
 * Aggregates per window of one partition's records, fed in offset order (keys and values as the consumer's
 * ByteBufferDeserializer hands them over: views, not copies): the rows of
 * spark_jobs/check/rdkafka.py's SOURCE_WINDOWS and DESTINATION_WINDOWS, with this package's record hash in
 * lo (a wrapping 64-bit sum: equal multisets give equal sums) and 0 in hi.
 */
final class WindowRows {
    static final String PROVENANCE_HEADER = "mirror.source";   // mirror_worker/provenance.py
    static final long POSITIONAL = -1;                         // spark_jobs/check/digest_rows.py
    static final long MAX_PARTITION = Integer.MAX_VALUE;

    private WindowRows() {}

    /** One partition's records in, its rows per window out. */
    interface Sink {
        void add(long offset, ByteBuffer key, ByteBuffer value, Headers headers);

        List<long[]> rows();
    }

    /** One source partition: (t, p, w, n, lo, hi = 0, beyond the mirror's committed offset). */
    static final class Source implements Sink {
        private final long t, p, window, committed;
        private final TreeMap<Long, long[]> rows = new TreeMap<>();
        private long w = -1, n, total, beyond, windowEnd = -1;

        Source(long t, long p, long window, long committed) {
            this.t = t; this.p = p; this.window = window; this.committed = committed;
        }

        @Override
        public void add(long offset, ByteBuffer key, ByteBuffer value, Headers headers) {
            if (offset >= windowEnd) {
                flush();
                w = offset / window;
                windowEnd = (w + 1) * window;
            }
            long h = RecordDigest.data(value, RecordDigest.data(key, RecordDigest.start(offset)));
            int count = 0;
            for (Header header : headers) {
                if (!PROVENANCE_HEADER.equals(header.key())) {
                    h = RecordDigest.header(header.key(), header.value(), h);
                    count++;
                }
            }
            n++;
            total += RecordDigest.end(h, count);
            if (offset >= committed) {
                beyond++;
            }
        }

        private void flush() {
            if (n > 0) {
                long[] acc = rows.computeIfAbsent(w, k -> new long[4]);
                acc[0] += n; acc[1] += total; acc[3] += beyond;
            }
            n = total = beyond = 0;
        }

        @Override
        public List<long[]> rows() {
            flush();
            List<long[]> out = new ArrayList<>();
            for (Map.Entry<Long, long[]> e : rows.entrySet()) {
                long[] a = e.getValue();
                out.add(new long[] {t, p, e.getKey(), a[0], a[1], a[2], a[3]});
            }
            return out;
        }
    }

    /**
     * One destination partition: per source (partition, window) of its copies, (t, p, w, dp, n, lo, hi = 0,
     * first/last destination offset, least/greatest source offset, least/greatest source - destination
     * offset); w = POSITIONAL (p = dp) for records without usable provenance. Copies of source offsets
     * outside the checked ranges are left out. Consecutive copies of one (partition, window) are summed as a
     * run (a mirror copies a partition in order), merged into the rows when the run ends.
     */
    static final class Destination implements Sink {
        private final long t, dp, window;
        private final byte[] sourceTopic, clusterId;              // clusterId null: any cluster
        private final Map<Long, long[]> ranges;                   // source partition -> {from, to}
        private final TreeMap<List<Long>, long[]> groups = new TreeMap<>(Destination::compareKeys);
        private byte[] seenPrefix;
        private long seenPartition = -1;
        private long[] span;
        private boolean inRun;
        private long runP, runW, n, total, firstDo, lastDo, leastSrc, mostSrc, leastShift, mostShift;

        Destination(long t, long dp, long window, String sourceTopic, String clusterId, Map<Long, long[]> ranges) {
            this.t = t; this.dp = dp; this.window = window; this.ranges = ranges;
            this.sourceTopic = sourceTopic.getBytes(StandardCharsets.UTF_8);
            this.clusterId = clusterId == null ? null : clusterId.getBytes(StandardCharsets.UTF_8);
        }

        private static int compareKeys(List<Long> a, List<Long> b) {
            int c = Long.compare(a.get(0), b.get(0));
            return c != 0 ? c : Long.compare(a.get(1), b.get(1));
        }

        @Override
        public void add(long offset, ByteBuffer key, ByteBuffer value, Headers headers) {
            byte[] provenance = null;
            int others = 0;
            for (Header header : headers) {
                if (PROVENANCE_HEADER.equals(header.key())) {
                    provenance = header.value();                  // the last one is the record's provenance
                } else {
                    others++;
                }
            }
            long src = provenance == null ? -1 : sourceOffset(provenance);
            long p, w, x;
            if (src < 0) {
                p = dp; w = POSITIONAL; src = -1; x = 0;          // no digest: the exact path compares these
            } else {
                if (span == null || src < span[0] || src >= span[1]) {
                    return;                                       // a copy of a record outside the checked range
                }
                p = seenPartition; w = src / window;
                long h = RecordDigest.data(value, RecordDigest.data(key, RecordDigest.start(src)));
                if (others > 0) {
                    for (Header header : headers) {
                        if (!PROVENANCE_HEADER.equals(header.key())) {
                            h = RecordDigest.header(header.key(), header.value(), h);
                        }
                    }
                }
                x = RecordDigest.end(h, others);
            }
            long shift = src - offset;
            if (!inRun || w != runW || p != runP) {
                flush();
                inRun = true; runP = p; runW = w; n = total = 0;
                firstDo = offset; leastSrc = mostSrc = src; leastShift = mostShift = shift;
            }
            n++;
            total += x;
            lastDo = offset;
            leastSrc = Math.min(leastSrc, src); mostSrc = Math.max(mostSrc, src);
            leastShift = Math.min(leastShift, shift); mostShift = Math.max(mostShift, shift);
        }

        /** The source offset a provenance value names, -1 when it names no record of this scope. The value is
         * `alias:cluster:topic:partition:offset`; the prefix before the offset repeats, so it is parsed once. */
        private long sourceOffset(byte[] value) {
            int colon = lastIndexOf(value, value.length);
            if (colon < 0) {
                return -1;
            }
            if (seenPrefix == null || !Arrays.equals(seenPrefix, 0, seenPrefix.length, value, 0, colon)) {
                seenPrefix = Arrays.copyOf(value, colon);
                seenPartition = prefixPartition(seenPrefix);
                span = seenPartition < 0 ? null : ranges.get(seenPartition);
            }
            if (seenPartition < 0) {
                return -1;
            }
            return digits(value, colon + 1, value.length, Long.MAX_VALUE);
        }

        /** `alias:cluster:topic:partition` -> partition, or -1 when it is not usable. */
        private long prefixPartition(byte[] prefix) {
            int c1 = indexOf(prefix, 0), c2 = c1 < 0 ? -1 : indexOf(prefix, c1 + 1);
            int c3 = c2 < 0 ? -1 : indexOf(prefix, c2 + 1);
            if (c3 < 0 || indexOf(prefix, c3 + 1) >= 0) {
                return -1;
            }
            if (!Arrays.equals(prefix, c2 + 1, c3, sourceTopic, 0, sourceTopic.length)) {
                return -1;
            }
            if (clusterId != null && c2 != c1 + 1 && !Arrays.equals(prefix, c1 + 1, c2, clusterId, 0, clusterId.length)) {
                return -1;
            }
            return digits(prefix, c3 + 1, prefix.length, MAX_PARTITION);
        }

        private void flush() {
            if (!inRun) {
                return;
            }
            long[] acc = groups.get(List.of(runP, runW));
            if (acc == null) {
                groups.put(List.of(runP, runW), new long[] {n, total, 0, firstDo, lastDo, leastSrc, mostSrc, leastShift, mostShift});
            } else {
                acc[0] += n; acc[1] += total;
                acc[3] = Math.min(acc[3], firstDo); acc[4] = Math.max(acc[4], lastDo);
                acc[5] = Math.min(acc[5], leastSrc); acc[6] = Math.max(acc[6], mostSrc);
                acc[7] = Math.min(acc[7], leastShift); acc[8] = Math.max(acc[8], mostShift);
            }
            inRun = false;
        }

        @Override
        public List<long[]> rows() {
            flush();
            List<long[]> out = new ArrayList<>();
            for (Map.Entry<List<Long>, long[]> e : groups.entrySet()) {
                long[] a = e.getValue();
                out.add(new long[] {t, e.getKey().get(0), e.getKey().get(1), dp, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]});
            }
            return out;
        }
    }

    static int indexOf(byte[] data, int from) {
        for (int i = from; i < data.length; i++) {
            if (data[i] == ':') {
                return i;
            }
        }
        return -1;
    }

    static int lastIndexOf(byte[] data, int before) {
        for (int i = before - 1; i >= 0; i--) {
            if (data[i] == ':') {
                return i;
            }
        }
        return -1;
    }

    /** The decimal number in data[from, to) (ASCII digits only, at least one), or -1 when it is not one or
     * exceeds `max`. */
    static long digits(byte[] data, int from, int to, long max) {
        if (from >= to) {
            return -1;
        }
        long value = 0;
        for (int i = from; i < to; i++) {
            int d = data[i] - '0';
            if (d < 0 || d > 9 || value > (max - d) / 10) {
                return -1;
            }
            value = value * 10 + d;
        }
        return value;
    }
}
