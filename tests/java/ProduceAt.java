// Writes records with exactly the CreateTime asked for, 0 included: librdkafka (and so confluent-kafka) reads a
// produce timestamp of 0 as "now", the Java client does not. Run as a single source file (JDK 11+):
//   java -cp '<kafka libs>/*' tests/java/ProduceAt.java BOOTSTRAP TOPIC PARTITION VALUE@TIMESTAMP...
import java.util.Properties;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class ProduceAt {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("acks", "all");
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        int partition = Integer.parseInt(args[2]);
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            for (int i = 3; i < args.length; i++) {
                int at = args[i].lastIndexOf('@');
                long timestamp = Long.parseLong(args[i].substring(at + 1));
                producer.send(new ProducerRecord<>(args[1], partition, timestamp, null, args[i].substring(0, at))).get();
            }
        }
    }
}
