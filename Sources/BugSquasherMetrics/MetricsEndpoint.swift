public import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
public import ServiceLifecycle

/// Serves `GET /metrics` in the Prometheus text format over HTTP, on an address of its own or
/// on a listening socket systemd passed (`squasherd-metrics.socket`), so that a daemon without a
/// network of its own serves scrapes. `collect` runs before each scrape, to set the gauges read
/// at that moment (sizes, counts, the process's memory).
/// Why a socket unit: docs/OPERATIONS.md, "Monitoring".
public struct MetricsEndpoint: Service {
    /// Where it listens.
    public enum Address: Sendable {
        /// A TCP address to bind, `host` and `port`.
        case bind(host: String, port: Int)
        /// A listening socket's descriptor, passed by systemd.
        case descriptor(Int32)
    }

    let address: Address
    let exporter: MetricsExporter
    let collect: @Sendable () -> Void
    let logger: Logger

    /// An endpoint serving `exporter`'s metrics at `address`.
    public init(
        address: Address, exporter: MetricsExporter, logger: Logger, collect: @escaping @Sendable () -> Void = {}
    ) {
        (self.address, self.exporter, self.logger, self.collect) = (address, exporter, logger, collect)
    }

    public func run() async throws {
        let (exporter, collect) = (exporter, collect)
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.backlog, value: 64)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.pipeline.configureHTTPServerPipeline().flatMap {
                    channel.pipeline.addHandler(ScrapeHandler(exporter: exporter, collect: collect))
                }
            }
        let channel: any Channel
        switch address {
        case .bind(let host, let port): channel = try await bootstrap.bind(host: host, port: port).get()
        case .descriptor(let fd): channel = try await bootstrap.withBoundSocket(fd).get()
        }
        logger.info(
            "serving metrics", metadata: ["metrics.address": "\(channel.localAddress.map { "\($0)" } ?? "fd")"])
        await withGracefulShutdownHandler {
            try? await channel.closeFuture.get()
        } onGracefulShutdown: {
            channel.close(promise: nil)
        }
    }
}

/// Answers `GET /metrics` (and `/`) with the registry's text; anything else with 404 or 405.
private final class ScrapeHandler: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let exporter: MetricsExporter
    let collect: @Sendable () -> Void
    private var head: HTTPRequestHead?

    init(exporter: MetricsExporter, collect: @escaping @Sendable () -> Void) {
        (self.exporter, self.collect) = (exporter, collect)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let request): head = request
        case .body: break
        case .end:
            guard let request = head else { return }
            head = nil
            respond(to: request, context: context)
        }
    }

    private func respond(to request: HTTPRequestHead, context: ChannelHandlerContext) {
        let path = request.uri.split(separator: "?").first.map(String.init) ?? request.uri
        if request.method != .GET && request.method != .HEAD {
            send(.methodNotAllowed, "text/plain", Array("Use GET /metrics.\n".utf8), to: request, context: context)
        } else if path == "/metrics" || path == "/" {
            // Collecting reads the store, which can wait for a database gone silent (until the
            // store's heartbeat gives up on it): on a thread of the pool, not on this event loop,
            // which serves other connections too.
            let (exporter, collect) = (exporter, collect)
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            NIOThreadPool.singleton.runIfActive(eventLoop: context.eventLoop) { exporter.bytes(collect: collect) }
                .whenSuccess { body in
                    let (handler, context) = bound.value
                    handler.send(
                        .ok, "text/plain; version=0.0.4; charset=utf-8", body, to: request, context: context)
                }
        } else {
            send(.notFound, "text/plain", Array("Metrics are at /metrics.\n".utf8), to: request, context: context)
        }
    }

    private func send(
        _ status: HTTPResponseStatus, _ type: String, _ body: [UInt8], to request: HTTPRequestHead,
        context: ChannelHandlerContext
    ) {
        var headers = HTTPHeaders([("Content-Type", type), ("Content-Length", "\(body.count)")])
        if !request.isKeepAlive { headers.add(name: "Connection", value: "close") }
        context.write(
            wrapOutboundOut(.head(HTTPResponseHead(version: request.version, status: status, headers: headers))),
            promise: nil)
        if request.method != .HEAD {
            context.write(
                wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
        }
        let (keepAlive, channel) = (request.isKeepAlive, context.channel)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in
            if !keepAlive { channel.close(promise: nil) }
        }
    }
}

extension MetricsEndpoint: CustomStringConvertible {
    /// "MetricsEndpoint", the service's name in the service group's logs: printed as a value, it
    /// would reflect everything it holds at each start of the daemon.
    public var description: String { "MetricsEndpoint" }
}
