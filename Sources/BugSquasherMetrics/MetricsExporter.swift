import CoreMetrics
import Prometheus
import Synchronization

/// The process's metrics registry: swift-metrics bootstrapped with swift-prometheus's factory,
/// so that every `Counter`, `Gauge` and `Timer` made after ``bootstrap()`` lands in it, and
/// the text a scrape or `squasherctl metrics` reads.
public final class MetricsExporter: Sendable {
    let registry = PrometheusCollectorRegistry()
    private static let bootstrapped = Mutex<MetricsExporter?>(nil)

    private init() {}

    /// The process's exporter, bootstrapping swift-metrics with it the first time (the metrics
    /// system can be bootstrapped once per process).
    public static func bootstrap() -> MetricsExporter {
        bootstrapped.withLock { current in
            if let current { return current }
            let exporter = MetricsExporter()
            var factory = PrometheusMetricsFactory(registry: exporter.registry)
            // Seconds from 1 ms to a minute: an edit's fan-out to a chunk's commit.
            factory.defaultDurationHistogramBuckets = [
                .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25),
                .milliseconds(50), .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1),
                .seconds(2.5), .seconds(5), .seconds(10), .seconds(30), .seconds(60),
            ]
            MetricsSystem.bootstrap(factory)
            current = exporter
            return exporter
        }
    }

    /// The metrics in Prometheus's text format, after `collect` set the gauges read now.
    public func text(collect: () -> Void = {}) -> String {
        collect()
        return registry.emitToString()
    }

    /// The same, as bytes.
    func bytes(collect: () -> Void) -> [UInt8] {
        collect()
        return registry.emitToBuffer()
    }
}
