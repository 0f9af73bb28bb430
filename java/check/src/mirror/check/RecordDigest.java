package mirror.check;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;

import net.jpountz.xxhash.XXHash64;
import net.jpountz.xxhash.XXHashFactory;

/**
 * A record's 64-bit hash for the digest pass, the JVM twin of spark_jobs/check/rdkafka.py's record hash:
 * (source offset, normalised key, normalised value, headers in order without the provenance header).
 *
 * Normalisation as the exact path compares records: a key or value of 5 bytes or more starting with magic
 * byte 0 is hashed without its schema id (bytes 1..4) and tagged apart from plain bytes; null differs from
 * empty; header values are not normalised. Each part is chained into the next one's seed and xxHash64 mixes
 * in lengths, so parts cannot run into each other. Only hashes of this class are ever compared together.
 */
final class RecordDigest {
    static final int FRAMING_SIZE = 5;          // magic byte + 4-byte schema id (mirror_worker/schemas/wire_format.py)
    private static final long NULL_TAG = 0x9E3779B97F4A7C15L;
    private static final long PLAIN_TAG = 0xC2B2AE3D27D4EB4FL;
    private static final long FRAMED_TAG = 0x165667B19E3779F9L;
    private static final long NAME_TAG = 0x27D4EB2F165667C5L;
    private static final XXHash64 XX = XXHashFactory.fastestJavaInstance().hash64();

    private RecordDigest() {}

    /** splitmix64's finaliser: a cheap bijective mix of 64 bits. */
    static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** A key or value, normalised: framed bytes without their schema id, tagged apart from plain bytes. */
    static long data(ByteBuffer data, long seed) {
        if (data == null) {
            return mix(seed ^ NULL_TAG);
        }
        int at = data.position(), length = data.remaining();
        if (length >= FRAMING_SIZE && data.get(at) == 0) {
            return XX.hash(data, at + FRAMING_SIZE, length - FRAMING_SIZE, seed ^ FRAMED_TAG);
        }
        return XX.hash(data, at, length, seed ^ PLAIN_TAG);
    }

    static long header(String name, byte[] value, long seed) {
        byte[] bytes = name.getBytes(StandardCharsets.UTF_8);
        long h = XX.hash(bytes, 0, bytes.length, seed ^ NAME_TAG);
        return value == null ? mix(h ^ NULL_TAG) : XX.hash(value, 0, value.length, h ^ PLAIN_TAG);
    }

    /** The start of a record's hash: its source offset. Then `data(key)`, `data(value)`, each `header`, `end`. */
    static long start(long sourceOffset) {
        return mix(sourceOffset * 0x9E3779B97F4A7C15L + 1);
    }

    static long end(long h, int headers) {
        return mix(h ^ headers);
    }
}
