import CSystemd
public import Foundation
public import Logging

/// A swift-log handler that writes natively to the systemd journal (`sd_journal_sendv(3)`): `MESSAGE`,
/// `PRIORITY`, `SYSLOG_IDENTIFIER`, `CODE_FILE`/`CODE_LINE`/`CODE_FUNC`, and each metadata key as a
/// field (``fieldName(_:)``; `message.id` is `MESSAGE_ID`). It never throws and never blocks on a full
/// journal: a failed send is dropped.
///
/// ```swift
/// if JournalLogHandler.shouldUse() { LoggingSystem.bootstrap { JournalLogHandler(label: $0, identifier: "squasherd") } }
/// ```
public struct JournalLogHandler: LogHandler {
    /// The logger's label (sent as `LOGGER`).
    public let label: String
    /// The `SYSLOG_IDENTIFIER`.
    public let identifier: String
    public var logLevel: Logger.Level = .info
    public var metadata: Logger.Metadata = [:]

    /// Creates a handler.
    public init(label: String, identifier: String) {
        self.label = label
        self.identifier = identifier
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    /// Whether stderr is connected to the journal (`JOURNAL_STREAM` names stderr's device and
    /// inode), as systemd sets it for `StandardError=journal`.
    public static func shouldUse(environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        guard let stream = environment["JOURNAL_STREAM"] else { return false }
        let parts = stream.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var info = stat()
        guard fstat(2, &info) == 0 else { return false }
        return UInt64(info.st_dev) == device && UInt64(info.st_ino) == inode
    }

    /// The journal priority of a level (syslog numbers).
    public static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    /// A metadata key as a valid journal field name: uppercased, characters outside `[A-Z0-9_]`
    /// turned into `_`, a leading `_` or digit prefixed with `F` (`job.id` becomes `JOB_ID`); never
    /// empty, never dropped.
    public static func fieldName(_ key: String) -> String {
        var name = String(
            key.uppercased().unicodeScalars.map { scalar -> Character in
                ("A"..."Z").contains(scalar) || ("0"..."9").contains(scalar) ? Character(scalar) : "_"
            })
        if name.isEmpty { name = "EMPTY" }
        if let first = name.first, first == "_" || first.isNumber { name = "F" + name }
        return String(name.prefix(64))
    }

    public func log(event: LogEvent) {
        var fields: [String] = [
            "MESSAGE=\(event.message)",
            "PRIORITY=\(Self.priority(event.level))",
            "SYSLOG_IDENTIFIER=\(identifier)",
            "LOGGER=\(label)",
            "CODE_FILE=\(event.file)",
            "CODE_LINE=\(event.line)",
            "CODE_FUNC=\(event.function)",
        ]
        if let error = event.error { fields.append("ERROR=\(error)") }
        let merged = metadata.merging(event.metadata ?? [:]) { _, new in new }
        for (key, value) in merged.sorted(by: { $0.key < $1.key }) {
            let name = key == "message.id" ? "MESSAGE_ID" : Self.fieldName(key)
            guard !["MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER", "CODE_FILE", "CODE_LINE", "CODE_FUNC"].contains(name)
            else {
                fields.append("META_\(name)=\(value)")
                continue
            }
            fields.append("\(name)=\(value)")
        }
        Self.send(fields)
    }

    static func send(_ fields: [String]) {
        // One contiguous buffer; the vectors point into it only inside `withUnsafeBytes`.
        var bytes: [UInt8] = []
        var ranges: [(Int, Int)] = []
        for field in fields {
            let start = bytes.count
            bytes.append(contentsOf: field.utf8)
            ranges.append((start, bytes.count - start))
        }
        bytes.withUnsafeBytes { raw in
            guard let base = raw.baseAddress else { return }
            let vectors = ranges.map { iovec(iov_base: UnsafeMutableRawPointer(mutating: base + $0.0), iov_len: $0.1) }
            _ = vectors.withUnsafeBufferPointer { sd_journal_sendv($0.baseAddress, CInt($0.count)) }
        }
    }
}
