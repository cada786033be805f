import ServiceLifecycle

/// A service the service group names by its type in its logs (`sl-service=UploadSweeper`).
///
/// Without a description, ServiceLifecycle names a service by printing its value, which for a
/// struct reflects every stored property and everything they hold: at each start of squasherd,
/// before it is ready, more than a fifth of the instructions of the start (callgrind).
protocol NamedService: Service, CustomStringConvertible {}

extension NamedService {
    /// The service's type name.
    var description: String { String(describing: Self.self) }
}

extension ShutdownAnnouncer: NamedService {}
extension HistoryPruner: NamedService {}
extension StoreFileGuard: NamedService {}
extension ServerService: NamedService {}
extension StoreService: NamedService {}
extension WatchdogService: NamedService {}
extension ClosedConnectionsTrimmer: NamedService {}
extension UploadSweeper: NamedService {}
extension StartupStopService: NamedService {}
