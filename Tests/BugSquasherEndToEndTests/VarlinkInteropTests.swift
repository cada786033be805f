import BugSquasherProtocol
import BugSquasherTesting
import Foundation
import Testing

/// Drives squasherd with the `varlink` package from PyPI: a client nobody here wrote.
@Suite("Varlink interoperability", .serialized)
struct VarlinkInteropTests {
    /// A python3 that can `import varlink`, if there is one.
    static func python() async throws -> String? {
        let venv = Products.packageRoot.appendingPathComponent(".build/venv/bin/python3").path
        for candidate in [venv, "/usr/bin/python3", "/usr/local/bin/python3"]
        where FileManager.default.isExecutableFile(atPath: candidate) {
            let check = try ChildProcess(
                name: "python3 -c 'import varlink'", executable: candidate, arguments: ["-c", "import varlink"])
            if try await check.waitForExit() == 0 { return candidate }
        }
        return nil
    }

    @Test("introspection, Subscribe and Fetch through python varlink")
    func pythonClient() async throws {
        let python = try #require(
            try await Self.python(),
            "python3 with the varlink package is needed; scripts/setup.sh installs it into .build/venv")
        try await withDaemon { squasherd in
            let records = (1...3).map {
                #"{"key":"INTEROP-\#($0)","title":"Interop \#($0)","status":"Open","labels":[],"project":{"key":"INTEROP"},"components":[],"comments":[]}"#
            }
            let file = squasherd.directory + "/interop.ndjson"
            try (records.joined(separator: "\n") + "\n").write(toFile: file, atomically: true, encoding: .utf8)
            try await squasherd.ctl(["import", file, "--wait"])
            let script = """
                import json, sys, varlink
                out = {}
                with varlink.Client(address="unix:" + sys.argv[1]) as client:
                    with client.open("org.varlink.service") as service:
                        info = service.GetInfo()
                        out["interfaces"] = info["interfaces"]
                        out["version"] = info["version"]
                        out["description"] = service.GetInterfaceDescription("io.bugsquasher.Changes")["description"]
                    with client.open("io.bugsquasher.Store") as store:
                        out["fetch"] = store.Fetch("Bug", 'key BEGINSWITH "INTEROP"', ["key"], None, None, "rows")
                    with client.open("io.bugsquasher.Changes") as changes:
                        for reply in changes.Subscribe(0, None, None, None, _more=True):
                            out.setdefault("subscribe", []).append(reply)
                            if len(out["subscribe"]) == 2:
                                break
                    try:
                        with client.open("io.bugsquasher.Store") as store:
                            store.Fetch("Nope")
                    except varlink.VarlinkError as error:
                        out["error"] = error.error()
                print(json.dumps(out))
                """
            let process = try ChildProcess(
                name: "python varlink", executable: python, arguments: ["-c", script, squasherd.readSocket])
            #expect(try await process.waitForExit() == 0, "\(process.errorOutput)")
            let result = try JSONSerialization.jsonObject(with: Data(process.output.joined().utf8)) as! [String: Any]
            #expect((result["interfaces"] as! [String]).contains("io.bugsquasher.Changes"))
            #expect((result["description"] as! String).contains("method Subscribe"))
            let rows = (result["fetch"] as! [String: Any])["rows"] as! [[String: Any]]
            #expect(
                rows.map { ($0["values"] as! [String: Any])["key"] as! String } == [
                    "INTEROP-1", "INTEROP-2", "INTEROP-3",
                ])
            let replies = result["subscribe"] as! [[String: Any]]
            #expect(replies.first?["event"] as? String == "subscribed")
            #expect(replies.last?["event"] as? String == "save")
            #expect(result["error"] as? String == "io.bugsquasher.Store.InvalidRequest")
            // The daemon's GetInfo, `squasherd --version` and `squasherctl --version` name one release.
            #expect(result["version"] as? String == BugSquasherVersion.current)
            for binary in [Products.squasherd, Products.squasherctl] {
                let version = try ChildProcess(name: "--version", executable: binary, arguments: ["--version"])
                #expect(try await version.waitForExit() == 0)
                #expect(version.output == [BugSquasherVersion.current], "\(binary) --version printed \(version.output)")
            }
        }
    }

    @Test("a client that shuts down its sending side after its calls still gets every reply")
    func halfClosingClient() async throws {
        try await withDaemon { squasherd in
            // What `printf '…\0' | socat - UNIX-CONNECT:…/squasherd.sock` does: the calls, then
            // the end of its input (SHUT_WR), then it reads the replies.
            let socket = try RawSocket(path: squasherd.readSocket)
            socket.send(
                varlinkCall(#"{"method":"io.bugsquasher.Store.Info"}"#)
                    + varlinkCall(#"{"method":"org.varlink.service.GetInfo"}"#))
            socket.finishSending()
            let replies = socket.receiveAll().split(separator: 0).map { String(decoding: $0, as: UTF8.self) }
            #expect(replies.count == 2, "\(replies)")
            #expect(replies.first?.contains(#""storeType":"SQLite""#) == true, "\(replies)")
            #expect(replies.last?.contains(#""vendor":"#) == true, "\(replies)")
            // Every call read was answered: squasherd then ends the connection.
            #expect(socket.peerClosed)
        }
    }

    /// A client that cannot upgrade a connection takes the backup in base64 replies (`more`).
    @Test("python varlink takes a backup in base64 replies")
    func pythonBackup() async throws {
        let python = try #require(
            try await Self.python(),
            "python3 with the varlink package is needed; scripts/setup.sh installs it into .build/venv")
        try await withDaemon { squasherd in
            let records = try squasherd.writeRecords("backup.ndjson", count: 300, prefix: "COPY", title: "copied")
            try await squasherd.ctl(["import", records.path, "--wait"])
            let script = """
                import base64, json, sqlite3, sys, varlink
                head, data = None, bytearray()
                with varlink.Client(address="unix:" + sys.argv[1]) as client:
                    with client.open("io.bugsquasher.Import") as service:
                        for reply in service.Backup(_more=True):
                            head = head or reply
                            data += base64.b64decode(reply.get("data") or "")
                with open(sys.argv[2], "wb") as out:
                    out.write(data)
                db = sqlite3.connect(sys.argv[2])
                bugs = db.execute("SELECT count(*) FROM Bug").fetchone()[0]
                token = db.execute("SELECT max(token) FROM bs_history").fetchone()[0]
                print(json.dumps({"bytes": head["bytes"], "received": len(data), "bugs": bugs, "token": token, "said": head["token"]}))
                """
            let process = try ChildProcess(
                name: "python varlink backup", executable: python,
                arguments: ["-c", script, squasherd.writeSocket, squasherd.directory + "/copy.sqlite"])
            #expect(try await process.waitForExit() == 0, "\(process.errorOutput)")
            let result = try JSONSerialization.jsonObject(with: Data(process.output.joined().utf8)) as! [String: Int]
            #expect(result["received"] == result["bytes"] && (result["bytes"] ?? 0) > 0, "\(result)")
            #expect(result["bugs"] == 300, "\(result)")
            #expect(result["token"] == result["said"], "\(result)")
        }
    }
}
