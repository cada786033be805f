import BugSquasherClient
import BugSquasherGraph
import BugSquasherModel
import BugSquasherProtocol
import BugSquasherTesting
import BugSquasherTransport
import BugSquasherVarlink
import Foundation
import Synchronization
import Testing

@Suite("End to end: import formats, rejects, hostile clients", .serialized)
struct ImportEndToEndTests {
    /// The summary line of `squasherctl import --wait`.
    func summary(_ lines: [String]) -> String { lines.first { $0.hasPrefix("job ") } ?? lines.joined(separator: "\n") }

    /// Also: a job name with a control character is refused, and squasherd --chunk-size outside 1...100000
    /// is a usage error.
    @Test("import-job records are read-only over the protocol")
    func jobRecordsAreTheDaemons() async throws {
        try await withDaemon { squasherd in
            let records = try squasherd.writeRecords("three.ndjson", count: 3, prefix: "BK", title: "kept")
            try await squasherd.ctl(["import", records.path, "--wait"])
            let job = try #require(try squasherd.ids(of: "ImportJob").first)
            let edits: [(String, [String: JSONValue])] = [
                (
                    "io.bugsquasher.Import.Update",
                    ["id": .string(job), "values": .object(["state": .string("running"), "imported": .int(-5)])]
                ),
                ("io.bugsquasher.Import.Delete", ["id": .string(job)]),
            ]
            for (method, parameters) in edits {
                let refused = try squasherd.refusal(method, parameters, on: .write)
                #expect(refused.name == "io.bugsquasher.Import.InvalidInput", "\(refused)")
                #expect(refused.explanation.contains("record of import jobs"), "\(refused)")
            }
            #expect(try await squasherd.ctl(["jobs"]).joined().contains("finished  three.ndjson"))
            // The read socket neither lists nor describes the write interface.
            let describe = "org.varlink.service.GetInterfaceDescription"
            let importInterface = ["interface": "io.bugsquasher.Import"]
            let hidden = try squasherd.refusal(describe, importInterface, on: .read)
            #expect(hidden.name == "org.varlink.service.InterfaceNotFound", "\(hidden)")
            let described = try squasherd.call(describe, importInterface, as: [String: String].self, on: .write)
            #expect(described["description"]?.contains("method Upload") == true)
            // A project with bugs cannot be deleted (deny rule); the refusal says what to do, in a
            // client's terms.
            let project = try #require(try squasherd.ids(of: "Project").first)
            let denied = try squasherd.refusal(
                "io.bugsquasher.Import.Delete", DeleteParameters(id: project), on: .write
            )
            .explanation
            #expect(
                denied.contains("The change was refused, and nothing was saved")
                    && denied.contains("delete those objects, or point them elsewhere, first")
                    && !denied.contains("roll back"), "\(denied)")
            // A row without a title prints its label alone, without trailing blanks.
            #expect(try await squasherd.ctl(["list", "--entity", "Project"]) == ["BK"])
            // Negative limits and offsets are refused the same way by every method, naming the parameter.
            for (call, said) in [
                (
                    #"{"method":"io.bugsquasher.Store.Fetch","parameters":{"entity":"Bug","offset":-5}}"#,
                    "offset must not be negative"
                ),
                (
                    #"{"method":"io.bugsquasher.Changes.History","parameters":{"after":0,"limit":0}}"#,
                    #""parameter":"limit""#
                ),
                (#"{"method":"io.bugsquasher.Jobs.List","parameters":{"limit":-1}}"#, #""parameter":"limit""#),
                (
                    #"{"method":"io.bugsquasher.Jobs.Rejects","parameters":{"job":"x","limit":0}}"#,
                    #""parameter":"limit""#
                ),
                // A token the store never issued is said, as Subscribe says it.
                (
                    #"{"method":"io.bugsquasher.Changes.History","parameters":{"after":99999999}}"#,
                    "io.bugsquasher.Changes.TokenAhead"
                ),
                // An upgrade the method does not make: refused, instead of a
                // subscription held past its reply that outlived its client.
                (
                    #"{"method":"io.bugsquasher.Changes.Subscribe","parameters":{},"more":true,"upgrade":true}"#,
                    #""parameter":"upgrade""#
                ),
            ] {
                let answer = try RawSocket.exchange(squasherd.readSocket, varlinkCall(call))
                #expect(answer.contains(said), "\(call): \(answer)")
            }
            #expect(
                try await squasherd.ctl(["status"]).joined().contains("subscribers 0,"),
                "no subscription outlived its connection")
            let begin = "io.bugsquasher.Import.Begin"
            let named = try squasherd.refusal(begin, ["name": "a\nforged log line"], on: .write)
            #expect(named.explanation.contains("control characters"), "\(named)")
            for blank in ["", "   "] {
                let unnamed = try squasherd.refusal(begin, ["name": blank], on: .write)
                #expect(unnamed.explanation.contains("the job name is empty"), "\(unnamed)")
            }
            #expect(try await squasherd.stop() == 0)

            let tooLarge = try ChildProcess(
                name: "squasherd", executable: Products.squasherd,
                arguments: [
                    "--chunk-size", "5000000", "--state-directory", squasherd.directory + "/state",
                    "--runtime-directory",
                    squasherd.directory + "/run",
                ])
            #expect(try await tooLarge.waitForExit() == 64)
            #expect(
                tooLarge.errorOutput.contains("--chunk-size must be between 1 and 100000"), "\(tooLarge.errorOutput)")
        }
    }

    /// import - without an input, status without an output; it does not read or write a socket of its own
    /// that took the descriptor's number.
    /// PROTOCOL promises an object's values in the model's order, attributes then to-ones (the
    /// Swift client reads that order fastest); replies encoded from a dictionary had them in an
    /// order of its own, another for each row.
    @Test("Fetch and Values write each object's values in the model's order")
    func valuesInModelOrder() async throws {
        try await withDaemon { squasherd in
            let input = try squasherd.writeRecords("order.ndjson", count: 3, prefix: "ORD", title: "t")
            try await squasherd.ctl(["import", input.path, "--wait"])
            let id = try #require(try squasherd.ids(of: "Bug", where: #"key == "ORD-1""#).first)
            let bug = try #require(BugModel.model.entity(named: "Bug"))
            let order = bug.attributes.map(\.name) + bug.toOneRelationships.map(\.name)
            for call in [
                #"{"method":"io.bugsquasher.Store.Fetch","parameters":{"entity":"Bug","result":"rows"}}"#,
                #"{"method":"io.bugsquasher.Store.Values","parameters":{"ids":["\#(id)"]}}"#,
            ] {
                let reply = try RawSocket.exchange(squasherd.readSocket, varlinkCall(call))
                for row in reply.components(separatedBy: #""values":"#).dropFirst() {
                    let places = order.compactMap { row.range(of: "\"\($0)\":")?.lowerBound }
                    #expect(places.count == order.count && places == places.sorted(), "\(call): \(row)")
                }
            }
        }
    }

    /// A read-modify-write from a script: `update --if-version` changes the bug only at the
    /// version it read, and says which version it is at instead (exit 6). `delete` deletes by
    /// key; an object without a row is `ObjectNotFound` over the protocol.
    @Test("update --if-version is a compare-and-set; delete deletes by key; a deleted object is not found")
    func updateIfVersion() async throws {
        try await withDaemon { squasherd in
            let input = try squasherd.writeRecords("cas.ndjson", count: 1, prefix: "CAS", title: "t")
            try await squasherd.ctl(["import", input.path, "--wait"])
            let read = try await squasherd.ctlJSON(["get", "CAS-1", "--json"], as: WireRow.self)
            let saved = try await squasherd.ctl(["update", "CAS-1", "status=Taken", "--if-version", "\(read.version)"])
            #expect(saved.joined().hasPrefix("CAS-1 is now version \(read.version + 1) (token "), "\(saved)")
            let stale = try await squasherd.ctlError(
                ["update", "CAS-1", "status=Mine", "--if-version", "\(read.version)"], expectStatus: 6)
            #expect(
                stale.contains("CAS-1 is at version \(read.version + 1), not \(read.version)")
                    && stale.contains("--if-version \(read.version + 1)"), "\(stale)")
            #expect(
                try await squasherd.ctlJSON(["get", "CAS-1", "--json"], as: WireRow.self).values["status"]
                    == .string("Taken"))
            // Unchanged at the version it holds: answered with that version, nothing saved.
            let same = try await squasherd.ctl([
                "update", "CAS-1", "status=Taken", "--if-version", "\(read.version + 1)",
            ])
            #expect(same.joined().hasPrefix("CAS-1 is now version \(read.version + 1) (token "), "\(same)")
            // Over the protocol: Conflict with the version now; a deleted object is ObjectNotFound.
            let conflict = try squasherd.refusal(
                "io.bugsquasher.Import.Update",
                UpdateParameters(id: read.id, values: ["status": .string("x")], ifVersion: 1), on: .write)
            #expect(
                conflict.name == "io.bugsquasher.Import.Conflict"
                    && conflict.parameters["version"] == .int(read.version + 1))
            // A relationship's edit goes through a context: the same check, the same answer.
            let related = try squasherd.refusal(
                "io.bugsquasher.Import.Update",
                UpdateParameters(id: read.id, values: ["assignee": .null], ifVersion: 1),
                on: .write)
            #expect(related.parameters["version"] == .int(read.version + 1), "\(related)")
            #expect(related.statement?.contains("is at version \(read.version + 1), not 1") == true, "\(related)")
            let deleted = try await squasherd.ctl(["delete", "CAS-1"])
            #expect(deleted.joined().hasPrefix("CAS-1 deleted (token "), "\(deleted)")
            let again = try await squasherd.ctlError(["delete", "CAS-1"], expectStatus: 3)
            #expect(again.contains("no bug with key CAS-1"), "\(again)")
            let gone = try squasherd.refusal(
                "io.bugsquasher.Import.Update", UpdateParameters(id: read.id, values: ["status": .string("x")]),
                on: .write)
            #expect(gone.name == "io.bugsquasher.Import.ObjectNotFound", "\(gone)")
            #expect(gone.statement?.contains("deleted, or never saved") == true, "\(gone)")
            let zero = try await squasherd.ctlError(
                ["update", "CAS-1", "status=x", "--if-version", "0"], expectStatus: 64)
            #expect(zero.contains("--if-version takes a version of the bug"), "\(zero)")
        }
    }

    /// `forget` is for the daemons of a shared store; on SQLite there is no other daemon.
    @Test("squasherctl forget on a SQLite store says there is no other daemon")
    func forgetAlone() async throws {
        try await withDaemon { squasherd in
            let refused = try await squasherd.ctlError(["forget", "0badc0de"], expectStatus: 2)
            #expect(refused.contains("runs alone on its store (SQLite)"), "\(refused)")
        }
    }

    /// A long import followed from a script or a CI job: its log gets plain progress lines (here
    /// one per update, `SQUASHERCTL_PROGRESS_INTERVAL=0`), not a terminal's bar.
    @Test("import --wait writes progress lines, not a bar, when standard error is a log")
    func progressLinesInALog() async throws {
        try await withDaemon { squasherd in
            let records = try squasherd.writeRecords("lines.ndjson", count: 500, prefix: "PL", title: "t")
            let process = try ChildProcess(
                name: "squasherctl import", executable: Products.squasherctl,
                arguments: ["import", records.path, "--wait", "--chunk-size", "100"],
                environment: squasherd.environment.merging(["SQUASHERCTL_PROGRESS_INTERVAL": "0"]) { $1 })
            #expect(try await process.waitForExit(timeout: .seconds(120)) == 0)
            let log = process.errorOutput
            #expect(log.contains("uploading: 100% (") && log.contains("importing: "), "\(log)")
            #expect(log.contains(" records, ") && !log.contains("\r") && !log.contains("\u{1B}"), "\(log)")
            #expect(summary(process.output).contains("500 imported"), "\(process.output)")
        }
    }

    @Test("squasherctl with standard input or output closed says so")
    func closedStandardStreams() async throws {
        try await withDaemon { squasherd in
            let environment = ["SQUASHERD_RUNTIME_DIRECTORY": squasherd.directory + "/run"]
            let noInput = try ChildProcess(
                name: "squasherctl import - <&-", executable: "/bin/sh",
                arguments: ["-c", "exec \"$0\" import - --wait <&-", Products.squasherctl], environment: environment)
            #expect(try await noInput.waitForExit(timeout: .seconds(30)) == 64)
            #expect(noInput.errorOutput.contains("standard input is closed"), "\(noInput.errorOutput)")
            let noOutput = try ChildProcess(
                name: "squasherctl status >&-", executable: "/bin/sh",
                arguments: ["-c", "exec \"$0\" status >&-", Products.squasherctl], environment: environment)
            #expect(try await noOutput.waitForExit(timeout: .seconds(30)) == 74)
            #expect(noOutput.errorOutput.contains("standard output is closed"), "\(noOutput.errorOutput)")
            // No job was begun for the missing input.
            #expect(try await squasherd.ctl(["jobs"]).isEmpty)
        }
    }

    /// Each reject carries its line and reason; imported + rejected = read.
    @Test("every format imports, and bad records go to the reject report")
    func formatsAndRejects() async throws {
        try await withDaemon(chunkSize: 2) { squasherd in
            let dir = squasherd.directory

            // Jira NDJSON with bad lines: invalid JSON, no key, wrong type, an oversized record.
            let good = { (key: String) in
                #"{"key":"\#(key)","fields":{"summary":"S \#(key)","status":{"name":"Open"},"project":{"key":"JIRA"},"created":"2011-04-15T02:23:39.000+0000"}}"#
            }
            let ndjson = [
                good("JIRA-1"), "{not json", #"{"fields":{"summary":"no key"}}"#, good("JIRA-2"), "",
                #"{"key":"JIRA-3","fields":{"summary":42}}"#, good("JIRA-4"),
            ]
            try (ndjson.joined(separator: "\n") + "\n").write(
                toFile: dir + "/a.ndjson", atomically: true, encoding: .utf8)
            let first = try await squasherd.ctl(["import", dir + "/a.ndjson", "--wait"])
            #expect(summary(first).contains("finished: 6 read, 3 imported, 3 rejected"), "\(first)")
            let job = String(summary(first).split(separator: " ")[1])
            let rejects = try await squasherd.ctl(["jobs", job, "--rejects"])
            #expect(rejects.count == 3)
            #expect(rejects[0].hasPrefix("line 2:"))
            #expect(rejects[1].hasPrefix("line 3:") && rejects[1].contains("key"))
            #expect(rejects[2].hasPrefix("line 6:"))
            // The report pages with limit and offset, in input order.
            let reader = try BlockingVarlinkClient(path: squasherd.readSocket)
            let pages = try [0, 2, 4].map {
                try reader.call(
                    "io.bugsquasher.Jobs.Rejects", RejectsParameters(job: job, limit: 2, offset: $0),
                    as: RejectsReply.self)
            }
            #expect(pages.map { $0.rejects.map(\.line) } == [[2, 3], [6], []], "\(pages)")
            #expect(pages.map(\.more) == [true, nil, nil])
            // One reply holds 10,000 rejects at most, whatever the limit asked (any local user may
            // ask, and an unread reply is held); squasherctl pages past it.
            let bad = (1...10_050).map { #"{"key":"","title":"no key \#($0)"}"# }.joined(separator: "\n") + "\n"
            try bad.write(toFile: squasherd.directory + "/bad.ndjson", atomically: true, encoding: .utf8)
            let badJob = try #require(
                try await squasherd.ctlProcess(
                    ["import", squasherd.directory + "/bad.ndjson", "--wait"], expectStatus: 2
                )
                .output.first?.split(separator: " ").dropFirst().first.map(String.init))
            let capped = try reader.call(
                "io.bugsquasher.Jobs.Rejects", RejectsParameters(job: badJob, limit: 100_000), as: RejectsReply.self)
            #expect(capped.rejects.count == 10_000 && capped.more == true)
            let allBad = try await squasherd.ctl(["jobs", badJob, "--rejects"])
            #expect(
                allBad.count == 10_050 && allBad.last?.hasPrefix("line 10050:") == true,
                "\(allBad.count) \(allBad.suffix(1))")
            #expect(throws: VarlinkError.invalidParameter("offset")) {
                try reader.call(
                    "io.bugsquasher.Jobs.Rejects", RejectsParameters(job: job, offset: -1), as: RejectsReply.self)
            }

            // A JSON array and a pretty-printed search response.
            try ("[\n" + [good("ARR-1"), good("ARR-2")].joined(separator: ",\n") + "\n]\n").write(
                toFile: dir + "/b.json", atomically: true, encoding: .utf8)
            #expect(
                summary(try await squasherd.ctl(["import", dir + "/b.json", "--wait"])).contains("2 read, 2 imported"))
            // A reject in it names the line the issue starts on and its position in the array.
            try
                ("{\n  \"startAt\": 0,\n  \"issues\": [\n"
                + [good("SR-1"), good("SR-2"), #"{"fields":{"summary":"no key"}}"#, good("SR-3")].joined(
                    separator: ",\n")
                + "\n  ],\n  \"total\": 4\n}\n").write(toFile: dir + "/c.json", atomically: true, encoding: .utf8)
            let response = try await squasherd.ctl(["import", dir + "/c.json", "--wait"])
            #expect(summary(response).contains("4 read, 3 imported, 1 rejected"), "\(response)")
            let responseRejects = try await squasherd.ctl([
                "jobs", String(summary(response).split(separator: " ")[1]), "--rejects",
            ])
            #expect(
                responseRejects.count == 1 && responseRejects[0].hasPrefix("line 6: issue 3 of the array: ")
                    && responseRejects[0].contains("key"), "\(responseRejects)")

            // Jira CSV with repeated Component/s columns and Jira dates; a bad date is a reject.
            let jiraCSV = """
                Summary,Issue key,Issue Type,Status,Priority,Project key,Component/s,Component/s,Created,Comment
                "Crash, on launch",CSV-1,Bug,Open,High,CSV,Android,iOS,15/Apr/11 2:23 AM,"15/Apr/11 3:00 AM;user-1;Seen ""again"" today"
                Second,CSV-2,Task,Closed,Low,CSV,,,not a date,
                "Multi
                line",CSV-3,Bug,Open,,CSV,Tooling,,2012-01-31 10:00,
                "Broken "quote" here",CSV-4,Bug,Open,,CSV,,,,

                """
            try jiraCSV.write(toFile: dir + "/d.csv", atomically: true, encoding: .utf8)
            let csvResult = try await squasherd.ctl(["import", dir + "/d.csv", "--wait"])
            #expect(summary(csvResult).contains("4 read, 2 imported, 2 rejected"), "\(csvResult)")
            let csvJob = String(summary(csvResult).split(separator: " ")[1])
            let csvRejects = try await squasherd.ctl(["jobs", csvJob, "--rejects"])
            #expect(csvRejects.first?.hasPrefix("line 3:") == true)
            #expect(
                csvRejects.last?.hasPrefix("line 6: field 1 has text after its closing quote") == true, "\(csvRejects)")
            // A Latin-1 export: the row is a reject, not a title with its accents replaced.
            try
                (Data("Summary,Issue key,Status\n".utf8) + Data([0x63, 0x61, 0x66, 0xE9])
                + Data(",LAT-1,Open\nplain,LAT-2,Open\n".utf8)).write(to: URL(filePath: dir + "/l.csv"))
            let latin1 = try await squasherd.ctl(["import", dir + "/l.csv", "--wait"])
            #expect(summary(latin1).contains("2 read, 1 imported, 1 rejected"), "\(latin1)")
            let latin1Rejects = try await squasherd.ctl([
                "jobs", String(summary(latin1).split(separator: " ")[1]), "--rejects",
            ])
            #expect(latin1Rejects.first?.hasPrefix("line 2: field 1 is not valid UTF-8") == true, "\(latin1Rejects)")
            #expect(
                try await squasherd.ctlError(["get", "CSV-4"], expectStatus: 3).contains("no bug with key CSV-4"),
                "a row with broken quoting is not guessed at")
            let csv1Lines = try await squasherd.ctl(["get", "CSV-1"])
            let csv1 = csv1Lines.joined(separator: "\n")
            #expect(csv1.contains("title: Crash, on launch"))
            #expect(csv1Lines.contains("  project: CSV"), "a to-one is shown as its key, not an object ID: \(csv1)")
            #expect(
                try await squasherd.ctl(["get", "CSV-3"]).joined(separator: "\n").contains(#"title: Multi\nline"#),
                "a newline in a value is shown escaped, on one line")

            // Bugzilla CSV, gzipped, from standard input.
            let bugzilla = """
                bug_id,product,component,assigned_to,bug_status,resolution,short_desc,changeddate
                101,Firefox,General,dev@example.invalid,NEW,---,Tab crashes,2011-04-15 02:23:39
                102,Firefox,Toolbar,,RESOLVED,FIXED,Toolbar overlaps,2011-04-16 10:00:00

                """
            try bugzilla.write(toFile: dir + "/e.csv", atomically: true, encoding: .utf8)
            #expect(
                try await ChildProcess(name: "gzip", executable: "/bin/gzip", arguments: ["-k", dir + "/e.csv"])
                    .waitForExit() == 0)
            let stdinProcess = try ChildProcess(
                name: "squasherctl import -", executable: Products.squasherctl, arguments: ["import", "-", "--wait"],
                environment: ["SQUASHERD_RUNTIME_DIRECTORY": dir + "/run"],
                stdin: FileHandle(forReadingAtPath: dir + "/e.csv.gz")!)
            #expect(try await stdinProcess.waitForExit() == 0, "\(stdinProcess.errorOutput)")
            #expect(summary(stdinProcess.output).contains("2 read, 2 imported"), "\(stdinProcess.output)")
            #expect(try await squasherd.ctl(["get", "BZ-102"]).joined(separator: "\n").contains("status: RESOLVED"))

            // NDJSON whose first record is broken is still NDJSON: that record is rejected, the rest import.
            try
                (#"{"key":"NB-0","title":"t",}"# + "\n"
                + #"{"key":"NB-1","title":"t","status":"Open","project":{"key":"NB"}}"# + "\n")
                .write(toFile: dir + "/g.ndjson", atomically: true, encoding: .utf8)
            let brokenFirst = try await squasherd.ctl(["import", dir + "/g.ndjson", "--wait"])
            #expect(summary(brokenFirst).contains("2 read, 1 imported, 1 rejected"), "\(brokenFirst)")
            // Blank lines (CRLF ones too) before the first issue and between issues are not records.
            try ("\n\r\n\n" + good("BL-1") + "\n\n" + good("BL-2") + "\n").write(
                toFile: dir + "/n.ndjson", atomically: true, encoding: .utf8)
            let blankFirst = try await squasherd.ctl(["import", dir + "/n.ndjson", "--wait"])
            #expect(summary(blankFirst).contains("2 read, 2 imported, 0 rejected"), "\(blankFirst)")
            // A misspelled field is a reject that names the field meant, not a record imported without it.
            try (#"{"key":"NB-1","titel":"renamed","project":{"key":"NB"}}"# + "\n").write(
                toFile: dir + "/m.ndjson", atomically: true, encoding: .utf8)
            // An import whose every record is a reject fails (exit 2), so that a script notices.
            let allRejected = try await squasherd.ctlProcess(
                ["import", dir + "/m.ndjson", "--format", "bugsquasher-ndjson", "--wait"], expectStatus: 2)
            let misspelled = allRejected.output
            #expect(summary(misspelled).contains("1 read, 0 imported, 1 rejected"), "\(misspelled)")
            #expect(
                allRejected.errorOutput.contains("every record of job")
                    && allRejected.errorOutput.contains("nothing was imported"), "\(allRejected.errorOutput)")
            let misspelledRejects = try await squasherd.ctl([
                "jobs", String(summary(misspelled).split(separator: " ")[1]), "--rejects",
            ])
            #expect(
                misspelledRejects.first?.contains("line 1: a bug record has no field 'titel' (did you mean 'title'?)")
                    == true, "\(misspelledRejects)")
            try ("{\"key\":\"NB-2\",\"fields\":{\"summ\n" + good("NB-3") + "\n" + good("NB-4") + "\n").write(
                toFile: dir + "/h.ndjson", atomically: true, encoding: .utf8)
            let truncatedFirst = try await squasherd.ctl(["import", dir + "/h.ndjson", "--wait"])
            #expect(summary(truncatedFirst).contains("3 read, 2 imported, 1 rejected"), "\(truncatedFirst)")
            // A one-record file, without a final newline, imports its record.
            try #"{"key":"ONE-1","title":"t","status":"Open","project":{"key":"ONE"}}"#.write(
                toFile: dir + "/k.ndjson", atomically: true, encoding: .utf8)
            let single = try await squasherd.ctl(["import", dir + "/k.ndjson", "--wait"])
            #expect(summary(single).contains("1 read, 1 imported, 0 rejected in "), "\(single)")
            // The summary says how long the job took and at what rate, here and in the job list.
            #expect(summary(single).contains(" records/s)"), "\(single)")
            #expect(try await squasherd.ctl(["jobs", "--limit", "1"]).first?.contains(" records/s)") == true)
            // A CSV holding its header only reads no record: not a failure (an export of a quiet
            // week), but said, so that nobody takes it for data.
            try "Summary,Issue key,Issue id,Status\n".write(
                toFile: dir + "/header.csv", atomically: true, encoding: .utf8)
            let headerOnly = try await squasherd.ctlProcess(["import", dir + "/header.csv", "--wait"], expectStatus: 0)
            #expect(summary(headerOnly.output).contains("0 read, 0 imported, 0 rejected"), "\(headerOnly.output)")
            #expect(headerOnly.errorOutput.contains("read no record"), "\(headerOnly.errorOutput)")
            // Text after a JSON array fails the job instead of being dropped.
            try ("[" + good("AR-9") + "]\n" + good("AR-10") + "\n").write(
                toFile: dir + "/i.json", atomically: true, encoding: .utf8)
            let trailing = try ChildProcess(
                name: "import trailing", executable: Products.squasherctl,
                arguments: ["import", dir + "/i.json", "--wait"],
                environment: ["SQUASHERD_RUNTIME_DIRECTORY": dir + "/run"]
            )
            #expect(try await trailing.waitForExit() == 2)
            #expect(trailing.errorOutput.contains("text follows the end of the JSON array"), "\(trailing.errorOutput)")

            // A file that is not what it claims to be fails the job with a clear message.
            try Data((0..<2048).map { UInt8(truncatingIfNeeded: $0 &* 7919) }).write(to: URL(filePath: dir + "/f.bin"))
            let failed = try ChildProcess(
                name: "import garbage", executable: Products.squasherctl,
                arguments: ["import", dir + "/f.bin", "--wait"],
                environment: ["SQUASHERD_RUNTIME_DIRECTORY": dir + "/run"])
            #expect(try await failed.waitForExit() == 2)
            #expect(failed.errorOutput.contains("not a supported format"), "\(failed.errorOutput)")
            try (#"{"key":"X-1","title":"t"}"# + "\n").write(toFile: dir + "/g.csv", atomically: true, encoding: .utf8)
            let claimed = try ChildProcess(
                name: "import mislabeled", executable: Products.squasherctl,
                arguments: ["import", dir + "/g.csv", "--format", "jira-csv"],
                environment: ["SQUASHERD_RUNTIME_DIRECTORY": dir + "/run"])
            #expect(try await claimed.waitForExit() == 2)
            #expect(claimed.errorOutput.contains("looks like bugsquasher-ndjson"), "\(claimed.errorOutput)")
            // An unknown --format is a usage error, named before anything is sent.
            let unknownFormat = try ChildProcess(
                name: "import unknown format", executable: Products.squasherctl,
                arguments: ["import", dir + "/g.csv", "--format", "nope"],
                environment: ["SQUASHERD_RUNTIME_DIRECTORY": dir + "/run"])
            #expect(try await unknownFormat.waitForExit() == 64)
            #expect(
                unknownFormat.errorOutput.contains(
                    "Unknown --format 'nope'; use one of jira-json, jira-csv, bugzilla-csv, bugsquasher-ndjson"),
                "\(unknownFormat.errorOutput)")

            // A gzip file cut short fails the job instead of importing what it held up to the cut.
            let whole = try Data(contentsOf: URL(filePath: dir + "/e.csv.gz"))
            try whole.prefix(whole.count - 8).write(to: URL(filePath: dir + "/cut.csv.gz"))
            let cut = try ChildProcess(
                name: "import cut gzip", executable: Products.squasherctl,
                arguments: ["import", dir + "/cut.csv.gz", "--wait"],
                environment: ["SQUASHERD_RUNTIME_DIRECTORY": dir + "/run"])
            #expect(try await cut.waitForExit() == 2)
            #expect(cut.errorOutput.contains("gzip data is incomplete"), "\(cut.errorOutput)")
            // A watcher asking for a token the store never issued is told so, with status 2.
            let ahead = try ChildProcess(
                name: "watch ahead", executable: Products.squasherctl, arguments: ["watch", "--since", "99999999"],
                environment: ["SQUASHERD_RUNTIME_DIRECTORY": dir + "/run"])
            #expect(try await ahead.waitForExit() == 2)
            #expect(ahead.errorOutput.contains("never issued that token"), "\(ahead.errorOutput)")
            // A directory is a usage error, found before any job is begun; an unknown job is not found.
            let directory = try ChildProcess(
                name: "import directory", executable: Products.squasherctl, arguments: ["import", dir],
                environment: ["SQUASHERD_RUNTIME_DIRECTORY": dir + "/run"])
            #expect(try await directory.waitForExit() == 64)
            #expect(directory.errorOutput.contains("is a directory"), "\(directory.errorOutput)")
            // An input that fails while it is read (here a directory on standard input: its first
            // read fails) is an unreadable input file too, and nothing of it is imported.
            let directoryInput = try #require(FileHandle(forReadingAtPath: dir))
            let unreadable = try ChildProcess(
                name: "import unreadable stdin", executable: Products.squasherctl,
                arguments: ["import", "-", "--format", "bugsquasher-ndjson"],
                environment: ["SQUASHERD_RUNTIME_DIRECTORY": dir + "/run"], stdin: directoryInput)
            #expect(try await unreadable.waitForExit() == 64)
            #expect(
                unreadable.errorOutput.contains("reading the input failed")
                    && unreadable.errorOutput.contains("Is a directory")
                    && unreadable.errorOutput.contains("nothing was imported"), "\(unreadable.errorOutput)")
            try directoryInput.close()
            let unknown = try ChildProcess(
                name: "jobs unknown", executable: Products.squasherctl, arguments: ["jobs", "nosuchjob"],
                environment: ["SQUASHERD_RUNTIME_DIRECTORY": dir + "/run"])
            #expect(try await unknown.waitForExit() == 3)
            #expect(unknown.errorOutput.contains("no job nosuchjob"), "\(unknown.errorOutput)")

            // The daemon is still there and counts everything.
            let status = try await squasherd.ctl(["status"]).joined(separator: "\n")
            // JIRA 3 + array 2 + search 3 + CSV 2 + Latin-1 CSV 1 + Bugzilla 2 + NDJSON 6
            #expect(status.contains("bugs 19,"), "\(status)")
        }
    }

    @Test("squasherctl list --help names every entity, import-job rejects included")
    func listHelpNamesEveryEntity() async throws {
        let help = try ChildProcess(
            name: "squasherctl list --help", executable: Products.squasherctl, arguments: ["list", "--help"])
        #expect(try await help.waitForExit() == 0)
        let text = help.output.joined(separator: " ").split(whereSeparator: \.isWhitespace).joined(separator: " ")
        for entity in BugModel.entities.map(\.name) {
            #expect(text.contains(entity), "\(entity) is not named in: \(text)")
        }
    }

    /// Bugzilla's Created and Resolved dates are stored, Issue id alone takes --project, any CSV imports
    /// with --map, and the job records what each column became.
    @Test("CSV exports with other column names import")
    func csvExportsWithOtherColumnNames() async throws {
        try await withDaemon { squasherd in
            let dir = squasherd.directory
            /// A bug's stored values, by `get --json`.
            func values(_ key: String) async throws -> [String: JSONValue] {
                try await squasherd.ctlJSON(["get", key, "--json"], as: WireRow.self).values.dictionary
            }
            // A Bugzilla-derived CSV, its dates with an offset: refused as Jira without a project,
            // imported as declared Bugzilla with every date kept.
            try """
            Issue id,Summary,Status,Priority,Resolution,Created,Resolved,Description
            1001,Crash on start,RESOLVED,P1,FIXED,2020-01-02 17:14:21+00:00,2020-01-03 09:00:00+00:00,It crashes
            1002,Slow scrolling,NEW,P3,,2020-02-02 10:00,,Slow

            """.write(toFile: dir + "/bz.csv", atomically: true, encoding: .utf8)
            let undeclared = try await squasherd.ctlError(["import", dir + "/bz.csv", "--wait"], expectStatus: 2)
            #expect(
                undeclared.contains("no 'Issue key'") && undeclared.contains("--project KEY")
                    && undeclared.contains("--format bugzilla-csv"), "\(undeclared)")
            let declared = try await squasherd.ctl(["import", dir + "/bz.csv", "--format", "bugzilla-csv", "--wait"])
            #expect(summary(declared).contains("2 read, 2 imported, 0 rejected"), "\(declared)")
            #expect(
                declared.contains {
                    $0.hasPrefix("columns: id=\"Issue id\"") && $0.contains("created=Created resolved=Resolved")
                }, "\(declared)")
            let first = try await values("BZ-1001")
            #expect(
                first["created"] == .string("2020-01-02T17:14:21.000Z")
                    && first["resolved"] == .string("2020-01-03T09:00:00.000Z"), "\(first)")
            let second = try await values("BZ-1002")
            #expect(
                second["created"] == .string("2020-02-02T10:00:00.000Z") && second["resolved"] == .null, "\(second)")
            // With a project, the same IDs become that project's keys.
            _ = try await squasherd.ctl(["import", dir + "/bz.csv", "--project", "LEGACY", "--wait"])
            #expect(try await values("LEGACY-1001")["resolved"] == .string("2020-01-03T09:00:00.000Z"))

            // Any CSV, with a mapping; an unreadable date is a reject naming its column, never a null.
            try """
            Ticket,Headline,Opened On,State,Votes
            APP-1,Broken login,2021-03-04 05:06:07,Open,3
            APP-2,Bad date,sometime,Open,1

            """.write(toFile: dir + "/tickets.csv", atomically: true, encoding: .utf8)
            let unmapped = try await squasherd.ctlError(["import", dir + "/tickets.csv", "--wait"], expectStatus: 2)
            #expect(
                unmapped.contains("looks like a CSV file")
                    && unmapped.contains("'Ticket', 'Headline', 'Opened On', 'State', 'Votes'"), "\(unmapped)")
            let mapped = try await squasherd.ctl([
                "import", dir + "/tickets.csv", "--map", "key=Ticket", "--map", "title=Headline", "--map",
                "created=Opened On", "--map", "status=State", "--wait",
            ])
            #expect(summary(mapped).contains("2 read, 1 imported, 1 rejected"), "\(mapped)")
            let job = String(summary(mapped).split(separator: " ")[1])
            #expect(
                try await squasherd.ctl(["jobs", job]).contains(
                    #"columns: key=Ticket summary=Headline status=State created="Opened On"; not imported: Votes"#))
            let rejects = try await squasherd.ctl(["jobs", job, "--rejects"])
            #expect(rejects.first?.hasPrefix("line 3: Column 'Opened On' holds 'sometime'") == true, "\(rejects)")
            let login = try await values("APP-1")
            #expect(
                login["title"] == .string("Broken login")
                    && login["created"] == .string("2021-03-04T05:06:07.000Z"),
                "\(login)")
            // A mapped column the header lacks, an unknown field, a mapping for JSON: each refused.
            let missing = try await squasherd.ctlError(
                ["import", dir + "/tickets.csv", "--map", "key=Nope", "--wait"], expectStatus: 2)
            #expect(missing.contains("--map key=Nope: the header has no column 'Nope'"), "\(missing)")
            let unknownField = try await squasherd.ctlError(
                ["import", dir + "/tickets.csv", "--map", "colour=Red"], expectStatus: 64)
            #expect(unknownField.contains("there is no field 'colour'"), "\(unknownField)")
            let records = try squasherd.writeRecords("r.ndjson", count: 1, prefix: "NJ", title: "json")
            let json = try await squasherd.ctlError(
                ["import", records.path, "--map", "key=Ticket", "--wait"], expectStatus: 2)
            #expect(json.contains("--map and --project apply to CSV exports only"), "\(json)")
        }
    }

    /// A byte order mark, CRLF line ends and a first record longer than the limit import as NDJSON, as does
    /// a single-line search response longer than it; SIGHUP, SIGUSR1 and SIGUSR2 do not end the daemon.
    @Test("awkward inputs still import, and stray signals do not end the daemon")
    func awkwardInputs() async throws {
        try await withDaemon(chunkSize: 10, configuration: "max_record_bytes = 4096\n") { squasherd in
            let dir = squasherd.directory
            let record = { (key: String, title: String) in
                #"{"key":"\#(key)","title":"\#(title)","status":"Open","project":{"key":"AW"}}"#
            }

            // As Windows editors save it: a byte order mark and CRLF.
            let bom =
                Data([0xEF, 0xBB, 0xBF]) + Data((record("AW-1", "one") + "\r\n" + record("AW-2", "two") + "\r\n").utf8)
            try bom.write(to: URL(filePath: dir + "/bom.ndjson"))
            let first = try await squasherd.ctl(["import", dir + "/bom.ndjson", "--wait"])
            #expect(summary(first).contains("finished: 2 read, 2 imported, 0 rejected"), "\(first)")

            // The first record is longer than max_record_bytes: a reject, not a misread format.
            let long = record("AW-3", String(repeating: "x", count: 10_000))
            try [long, record("AW-4", "four")].joined(separator: "\n").appending("\n").write(
                toFile: dir + "/long.ndjson", atomically: true, encoding: .utf8)
            let second = try await squasherd.ctl(["import", dir + "/long.ndjson", "--wait"])
            #expect(summary(second).contains("finished: 2 read, 1 imported, 1 rejected"), "\(second)")
            let job = String(summary(second).split(separator: " ")[1])
            let rejects = try await squasherd.ctl(["jobs", job, "--rejects"])
            #expect(rejects.first?.hasPrefix("line 1: record is longer than 4096 bytes") == true, "\(rejects)")

            // A search response on one line, longer than the limit, is still a search response.
            let issue = { (key: String) in
                #"{"key":"\#(key)","fields":{"summary":"S \#(key)","status":{"name":"Open"},"project":{"key":"AW"}}}"#
            }
            let response =
                #"{"startAt":0,"total":100,"issues":["# + (1...100).map { issue("AWJ-\($0)") }.joined(separator: ",")
                + "]}"
            #expect(response.utf8.count > 4096)
            try response.write(toFile: dir + "/search.json", atomically: true, encoding: .utf8)
            let third = try await squasherd.ctl(["import", dir + "/search.json", "--wait"])
            #expect(summary(third).contains("finished: 100 read, 100 imported, 0 rejected"), "\(third)")

            // A terminal's hangup is logged and ignored.
            squasherd.process.signal(SIGHUP)
            try await squasherd.waitForLog("SIGHUP ignored")
            // So are SIGUSR1 and SIGUSR2 (their default action ended the daemon without a word).
            squasherd.process.signal(SIGUSR1)
            try await squasherd.waitForLog("SIGUSR1 ignored")
            squasherd.process.signal(SIGUSR2)
            try await squasherd.waitForLog("SIGUSR2 ignored")
            #expect(try await squasherd.ctl(["get", "AW-1"]).joined(separator: "\n").contains("title: one"))
        }
    }

    /// A chunk holds about 8 MiB of input at most, even before --chunk-size records; memory freed is given
    /// back when the job ends.
    @Test("large records end a chunk early, bounding an import's memory by bytes")
    func chunksBoundedByBytes() async throws {
        try await withDaemon { squasherd in
            let details = String(repeating: "Steps to reproduce, with a long log. ", count: 4_300_000 / 37)
            let records = (1...3).map {
                #"{"key":"FAT-\#($0)","title":"fat \#($0)","details":"\#(details)","status":"Open","project":{"key":"FAT"}}"#
            }
            try (records.joined(separator: "\n") + "\n").write(
                toFile: squasherd.directory + "/fat.ndjson", atomically: true, encoding: .utf8)
            func token() async throws -> Int {
                let status = try await squasherd.ctl(["status"]).joined()
                let digits = try #require(status.firstMatch(of: /history token (\d+)/)?.1, "\(status)")
                return try #require(Int(digits))
            }
            // The history tokens an import of three records takes: its job's own saves and one per chunk.
            func saves(_ file: String) async throws -> Int {
                let before = try await token()
                let result = try await squasherd.ctl(["import", file, "--chunk-size", "1000", "--wait"])
                #expect(summary(result).contains("3 read, 3 imported, 0 rejected"), "\(result)")
                return try await token() - before
            }
            let small = try squasherd.writeRecords("small.ndjson", count: 3, prefix: "THIN", title: "thin")
            let oneChunk = try await saves(small.path)
            // 4.3 MB each: two records pass 8 MiB, so the chunks hold 2 and 1 records.
            let fat = try await saves(squasherd.directory + "/fat.ndjson")
            #expect(fat - oneChunk == 1, "\(fat) saves, against \(oneChunk) for one chunk")
            #expect(try await squasherd.ctl(["get", "FAT-3"]).joined(separator: "\n").contains("title: fat 3"))
        }
    }

    /// Chunks are prepared while the previous one saves; people, components and bugs are each stored once.
    @Test("with chunks prepared ahead, a key's last record wins and nothing is stored twice")
    func chunksPreparedAhead() async throws {
        // Chunks of two: chunk n + 1 is upserted while chunk n is being saved, unless it reads
        // something chunk n writes. Each case below reads what the chunk before it wrote.
        try await withDaemon(chunkSize: 2) { squasherd in
            let dir = squasherd.directory
            func record(_ key: String, status: String, reporter: String? = nil, component: String? = nil) -> String {
                var fields = [
                    #""key":"\#(key)""#, #""title":"t \#(key)""#, #""status":"\#(status)""#,
                    #""project":{"key":"PIPE"}"#,
                ]
                if let reporter { fields.append(#""reporter":{"name":"\#(reporter)"}"#) }
                if let component { fields.append(#""components":["\#(component)"]"#) }
                return "{" + fields.joined(separator: ",") + "}"
            }
            try ([record("PIPE-1", status: "Open"), record("PIPE-2", status: "Open")].joined(separator: "\n") + "\n")
                .write(toFile: dir + "/seed.ndjson", atomically: true, encoding: .utf8)
            #expect(
                summary(try await squasherd.ctl(["import", dir + "/seed.ndjson", "--wait"])).contains(
                    "2 read, 2 imported"))
            let lines = [
                record("PIPE-1", status: "Closed", reporter: "zoe", component: "Core"),  // chunk 1
                record("PIPE-10", status: "Open", reporter: "yan"),
                // chunk 2: PIPE-1 and zoe were written by chunk 1
                record("PIPE-1", status: "Reopened", reporter: "zoe"),
                record("PIPE-11", status: "Open", reporter: "zoe", component: "Core"),
                record("PIPE-12", status: "Open", reporter: "yan"),  // chunk 3: nothing of chunk 2's writes
                record("PIPE-2", status: "Closed"),
                record("PIPE-2", status: "Resolved"),  // chunk 4: PIPE-2 again
                record("PIPE-13", status: "Open", reporter: "xia", component: "UI"),
            ]
            try (lines.joined(separator: "\n") + "\n").write(
                toFile: dir + "/pipe.ndjson", atomically: true, encoding: .utf8)
            let result = try await squasherd.ctl(["import", dir + "/pipe.ndjson", "--wait"])
            #expect(summary(result).contains("finished: 8 read, 8 imported, 0 rejected"), "\(result)")
            #expect(try await squasherd.ctl(["get", "PIPE-1"]).joined(separator: "\n").contains("status: Reopened"))
            #expect(try await squasherd.ctl(["get", "PIPE-2"]).joined(separator: "\n").contains("status: Resolved"))
            #expect(try await squasherd.ctl(["list", "--entity", "Person", "--count"]) == ["3"])
            #expect(try await squasherd.ctl(["list", "--entity", "Component", "--count"]) == ["2"])
            #expect(
                try await squasherd.ctl(["list", "--entity", "Bug", "--where", #"project.key == "PIPE""#, "--count"])
                    == ["6"]
            )
            #expect(
                try await squasherd.ctl(["list", "--entity", "Bug", "--where", #"reporter.name == "zoe""#, "--count"])
                    == [
                        "2"
                    ])
            // No chunk met a duplicate key and fell back to record-by-record imports.
            #expect(
                !squasherd.process.errorOutput.contains("one by one"), "\(squasherd.process.errorOutput.suffix(2000))")
        }
    }

    /// A nightly re-import of an export in which little changed costs little: the lines that are
    /// the bytes their bug was last imported from are skipped (docs/DESIGN-NOTES.md).
    @Test("unchanged lines are skipped; edited bugs and a key's last record are applied again")
    func unchangedLinesSkipped() async throws {
        try await withDaemon(chunkSize: 2) { squasherd in
            let dir = squasherd.directory
            func jira(_ key: String, status: String, comment: String = "first") -> String {
                #"{"id":"1\#(key.filter(\.isNumber))","key":"\#(key)","fields":{"summary":"S \#(key)","status":{"name":"\#(status)"},"project":{"key":"SKIP"},"comment":{"comments":[{"id":"c\#(key)","body":"\#(comment)","author":{"name":"ann"}}]}}}"#
            }
            func write(_ name: String, _ lines: [String]) throws -> String {
                try (lines.joined(separator: "\n") + "\n").write(
                    toFile: dir + "/" + name, atomically: true, encoding: .utf8)
                return dir + "/" + name
            }
            /// The bugs and comments the saves after `token` changed.
            func changed(after token: Int64) throws -> [String] {
                let reply = try squasherd.call(
                    "io.bugsquasher.Changes.History", HistoryParameters(after: token), as: HistoryReply.self)
                return reply.saves.flatMap { $0.inserted + $0.updated }.map(\.id)
                    .filter { $0.contains("/Bug/") || $0.contains("/Comment/") }
            }
            func status(_ key: String) async throws -> String {
                try await squasherd.ctl(["get", key]).map { $0.trimmingCharacters(in: .whitespaces) }
                    .first { $0.hasPrefix("status:") } ?? ""
            }
            let export = try write(
                "export.ndjson", (1...5).map { jira("SKIP-\($0)", status: "Open") })
            #expect(summary(try await squasherd.ctl(["import", export, "--wait"])).contains("5 read, 5 imported"))

            // The same export again: every line skipped, no bug or comment saved.
            var token = try squasherd.status().token
            #expect(summary(try await squasherd.ctl(["import", export, "--wait"])).contains("5 read, 5 imported"))
            #expect(try changed(after: token).isEmpty)

            // An edited bug, and a bug whose comment was edited, take the export's values again.
            try await squasherd.ctl(["update", "SKIP-1", "status=Closed"])
            let comment = try #require(try squasherd.ids(of: "Comment", where: #"jiraID == "cSKIP-2""#).first)
            _ = try squasherd.call(
                "io.bugsquasher.Import.Update", UpdateParameters(id: comment, values: ["body": .string("edited")]),
                as: UpdateReply.self, on: .write)
            token = try squasherd.status().token
            #expect(summary(try await squasherd.ctl(["import", export, "--wait"])).contains("5 read, 5 imported"))
            #expect(try await status("SKIP-1") == "status: Open")
            #expect(
                try await squasherd.ctl(["list", "--entity", "Comment", "--where", #"body == "first""#, "--count"]) == [
                    "5"
                ])
            // SKIP-1 and the comment, and SKIP-2, which takes its digest back.
            let reapplied = try changed(after: token)
            #expect(reapplied.count == 3, "\(reapplied)")

            // A key's last record wins over a skip: SKIP-3 changed in chunk 1 and back to its
            // imported bytes in chunk 2 (before chunk 1 committed, perhaps), and SKIP-4 twice in
            // one chunk.
            let turns = try write(
                "turns.ndjson",
                [
                    jira("SKIP-3", status: "Closed"), jira("SKIP-5", status: "Open"),
                    jira("SKIP-3", status: "Open"), jira("SKIP-5", status: "Open"),
                    jira("SKIP-4", status: "Closed"), jira("SKIP-4", status: "Open"),
                ])
            #expect(summary(try await squasherd.ctl(["import", turns, "--wait"])).contains("6 read, 6 imported"))
            #expect(try await status("SKIP-3") == "status: Open")
            #expect(try await status("SKIP-4") == "status: Open")
            // A changed line is applied: its new comment too.
            token = try squasherd.status().token
            let changedExport = try write(
                "changed.ndjson", [jira("SKIP-5", status: "Resolved", comment: "second")])
            #expect(summary(try await squasherd.ctl(["import", changedExport, "--wait"])).contains("1 imported"))
            #expect(try await status("SKIP-5") == "status: Resolved")
            let applied = try changed(after: token)
            #expect(applied.count == 2, "\(applied)")

            // An issue moved to another project: a new key, with the comment it had under the old
            // one. The comments of bugs new to the store are not looked up, so the save meets the
            // comment's unique key; the chunk is then saved again whole, every key looked up, and
            // the comment moves — not record by record. The chunks after it, prepared while it
            // saved, are prepared again and saved once it is in.
            let oneByOne = squasherd.process.errorOutput.components(separatedBy: "one by one").count
            let movedLine =
                #"{"id":"1999","key":"MOVED-2","fields":{"summary":"S MOVED-2","status":{"name":"Open"},"project":{"key":"MOVE"},"comment":{"comments":[{"id":"cSKIP-2","body":"first","author":{"name":"ann"}}]}}}"#
            let moved = try write(
                "moved.ndjson", [movedLine] + (6...9).map { jira("SKIP-\($0)", status: "Open") })
            let result = try await squasherd.ctl(["import", moved, "--wait"])
            #expect(summary(result).contains("5 read, 5 imported, 0 rejected"), "\(result)")
            for (bug, comments) in [("MOVED-2", "1"), ("SKIP-2", "0")] + (6...9).map({ ("SKIP-\($0)", "1") }) {
                #expect(
                    try await squasherd.ctl([
                        "list", "--entity", "Comment", "--where", #"bug.key == "\#(bug)""#, "--count",
                    ])
                        == [comments], "comments of \(bug)")
            }
            let log = squasherd.process.errorOutput
            #expect(log.contains("saved again with every key looked up"), "\(log.suffix(2000))")
            #expect(log.components(separatedBy: "one by one").count == oneByOne, "\(log.suffix(2000))")
        }
    }

    /// The rest of the daemon keeps its priority.
    @Test("chunks are upserted on the import threads at import_nice, decoded ahead 5 steps nicer")
    func importThreads() async throws {
        try await withDaemon(chunkSize: 500, configuration: "import_nice = 7\n") { squasherd in
            let dir = squasherd.directory
            let lines = (1...20_000).map {
                #"{"key":"NICE-\#($0)","title":"Crash \#($0)","status":"Open","project":{"key":"NICE"}}"#
            }
            try (lines.joined(separator: "\n") + "\n").write(
                toFile: dir + "/nice.ndjson", atomically: true, encoding: .utf8)
            #expect(
                summary(try await squasherd.ctl(["import", dir + "/nice.ndjson", "--wait"])).contains(
                    "20000 imported, 0 rejected"))
            // /proc/PID/task/TID/stat: field 14 + 15 are the CPU ticks, field 19 the nice value.
            var importTicks = 0
            var importThreads = 0
            var decodeTicks = 0
            var decodeThreads = 0
            var otherNice: Set<Int> = []
            let tasks = "/proc/\(squasherd.process.pid)/task"
            for tid in try FileManager.default.contentsOfDirectory(atPath: tasks) {
                guard let comm = try? String(contentsOfFile: "\(tasks)/\(tid)/comm", encoding: .utf8),
                    let stat = try? String(contentsOfFile: "\(tasks)/\(tid)/stat", encoding: .utf8),
                    let fields = stat.split(separator: ")").last?.split(separator: " ").map(String.init)
                else { continue }
                let ticks = (Int(fields[11]) ?? 0) + (Int(fields[12]) ?? 0)
                let nice = Int(fields[16]) ?? 0
                if comm.hasPrefix("import-") {
                    importThreads += 1
                    importTicks += ticks
                    #expect(nice == 7, "\(comm.trimmingCharacters(in: .whitespacesAndNewlines)) runs at nice \(nice)")
                } else if comm.hasPrefix("decode-") {
                    // Decoding ahead gives way to the upsert and the hand-over to the writer.
                    decodeThreads += 1
                    decodeTicks += ticks
                    #expect(nice == 12, "\(comm.trimmingCharacters(in: .whitespacesAndNewlines)) runs at nice \(nice)")
                } else {
                    otherNice.insert(nice)
                }
            }
            #expect(importThreads == 2 && decodeThreads == 2)
            #expect(importTicks > 0, "the import threads did no work")
            #expect(decodeTicks > 0, "the decoding threads did no work")
            #expect(otherNice.isDisjoint(with: [7, 12]), "another thread runs at the import's priority")
            #expect(!squasherd.process.errorOutput.contains("cannot lower the import threads' priority"))
        }
    }

    /// The next call gets a fresh connection.
    @Test("a pipelined upload arrives in order; an error reply stops it")
    func pipelinedUpload() async throws {
        try await withDaemon(chunkSize: 50) { squasherd in
            let client = try BlockingVarlinkClient(path: squasherd.writeSocket)
            let records = (1...200).map {
                #"{"key":"UP-\#($0)","title":"piece \#($0)","status":"Open","project":{"key":"UP"}}"#
            }
            let bytes = Array((records.joined(separator: "\n") + "\n").utf8)
            // 37-byte pieces cut records anywhere: out of order, the spool would hold broken lines.
            var pieces = stride(from: 0, to: bytes.count, by: 37).map { Data(bytes[$0..<min($0 + 37, bytes.count)]) }[
                ...]
            let job = try client.call(
                "io.bugsquasher.Import.Begin", BeginImportParameters(name: "pipelined", format: nil, chunkSize: nil),
                as: JobParameter.self
            ).job
            var acknowledged: [Int] = []
            try client.pipeline("io.bugsquasher.Import.Append", as: BytesReply.self, window: 4) {
                () -> AppendParameters? in
                pieces.popFirst().map { AppendParameters(job: job, data: $0.base64EncodedString()) }
            } body: {
                acknowledged.append($0.bytes)
            }
            #expect(acknowledged.reduce(0, +) == bytes.count)
            #expect(acknowledged.dropLast().allSatisfy { $0 == 37 })
            _ = try client.call("io.bugsquasher.Import.Commit", JobParameter(job: job), as: JobParameter.self)
            var final: WireJob?
            try BlockingVarlinkClient(path: squasherd.readSocket).stream(
                "io.bugsquasher.Jobs.Watch", JobParameter(job: job)
            ) { reply in
                final = try reply.parameters(JobReply.self).job
                return true
            }
            #expect(
                final?.state == .finished && final?.imported == 200 && final?.rejected == 0,
                "\(String(describing: final))")

            // The fourth of six calls fails: three replies arrive, then the error; the calls after
            // it may have run, so the client does not reuse the connection.
            let second = try client.call(
                "io.bugsquasher.Import.Begin", BeginImportParameters(name: "broken", format: nil, chunkSize: nil),
                as: JobParameter.self
            ).job
            var sent = 0
            var replies = 0
            var failure: (any Error)?
            do {
                try client.pipeline("io.bugsquasher.Import.Append", as: BytesReply.self, window: 4) {
                    () -> AppendParameters? in
                    sent += 1
                    guard sent <= 6 else { return nil }
                    return AppendParameters(
                        job: second, data: sent == 4 ? "not base64!" : Data("{}".utf8).base64EncodedString())
                } body: { _ in
                    replies += 1
                }
            } catch {
                failure = error
            }
            #expect(replies == 3)
            #expect("\(String(describing: failure))".contains("not base64"), "\(String(describing: failure))")
            let info = try client.call(
                "io.bugsquasher.Import.Begin", BeginImportParameters(name: "after", format: nil, chunkSize: nil),
                as: JobParameter.self)
            #expect(!info.job.isEmpty)
        }
    }

    /// Binary bytes stay intact and the zero length commits; broken framing, a dropped connection and a
    /// missing upgrade flag are each answered.
    @Test("an upgraded upload takes chunks split anywhere and answers each error")
    func upgradedUpload() async throws {
        try await withDaemon(chunkSize: 50) { squasherd in
            let write = try BlockingVarlinkClient(path: squasherd.writeSocket)
            let read = try BlockingVarlinkClient(path: squasherd.readSocket)
            func final(_ job: String) throws -> WireJob? {
                var last: WireJob?
                try read.stream("io.bugsquasher.Jobs.Watch", JobParameter(job: job)) { reply in
                    last = try reply.parameters(JobReply.self).job
                    return true
                }
                return last
            }
            func begin(_ name: String) throws -> String {
                try write.call(
                    "io.bugsquasher.Import.Begin", BeginImportParameters(name: name, format: nil, chunkSize: nil),
                    as: JobParameter.self
                ).job
            }

            // gzip: bytes with NULs in them, cut into chunks of 1 to 700 bytes, each sent in two writes.
            let records = (1...300).map {
                #"{"key":"UG-\#($0)","title":"upgraded \#($0)","status":"Open","project":{"key":"UG"}}"#
            }
            try (records.joined(separator: "\n") + "\n").write(
                toFile: squasherd.directory + "/up.ndjson", atomically: true, encoding: .utf8)
            #expect(
                try await ChildProcess(
                    name: "gzip", executable: "/bin/gzip", arguments: ["-k", squasherd.directory + "/up.ndjson"]
                ).waitForExit() == 0)
            let file = [UInt8](try Data(contentsOf: URL(filePath: squasherd.directory + "/up.ndjson.gz")))
            #expect(file.contains(0))
            let job = try begin("upgraded")
            let reply = try write.upgrade("io.bugsquasher.Import.Upload", JobParameter(job: job)) { connection in
                var offset = 0
                var size = 1
                while offset < file.count {
                    let piece =
                        UploadFraming.header(min(size, file.count - offset))
                        + file[offset..<min(offset + size, file.count)]
                    try piece[..<3].withUnsafeBytes { try connection.send($0) }
                    try piece[3...].withUnsafeBytes { try connection.send($0) }
                    offset += size
                    size = size % 700 + 97
                }
                try UploadFraming.header(0).withUnsafeBytes { try connection.send($0) }
                return try connection.receiveReply().parameters(UploadReply.self)
            }
            #expect(reply.job == job && reply.bytes == Int64(file.count))
            let imported = try final(job)
            #expect(
                imported?.state == .finished && imported?.imported == 300 && imported?.rejected == 0,
                "\(String(describing: imported))")

            // A length no chunk may have (JSON sent after the upgrade): an error reply at once, and
            // the job fails with the reason.
            let broken = try begin("broken framing")
            var failure: (any Error)?
            do {
                _ = try write.upgrade("io.bugsquasher.Import.Upload", JobParameter(job: broken)) { connection in
                    try Array(#"{"method":"io.bugsquasher.Import.Commit"}"#.utf8).withUnsafeBytes {
                        try connection.send($0)
                    }
                    return try connection.receiveReply().parameters(UploadReply.self)
                }
            } catch {
                failure = error
            }
            #expect(
                "\(String(describing: failure))".contains("InvalidInput")
                    && "\(String(describing: failure))".contains("longer than"), "\(String(describing: failure))")
            let failed = try final(broken)
            #expect(
                failed?.state == .failed && failed?.error?.contains("broke off") == true,
                "\(String(describing: failed))")

            // A client that goes away in the middle of a chunk did not send the whole file: the
            // upload is abandoned, never committed.
            let socket = try RawSocket(path: squasherd.writeSocket)
            socket.send(varlinkCall(#"{"method":"io.bugsquasher.Import.Begin","parameters":{"name":"dropped"}}"#))
            let dropped = try JSONDecoder().decode(
                [String: JobParameter].self, from: Data(socket.receiveMessage().utf8))[
                    "parameters"]!.job
            socket.send(
                varlinkCall(
                    #"{"method":"io.bugsquasher.Import.Upload","parameters":{"job":"\#(dropped)"},"upgrade":true}"#)
            )
            #expect(socket.receiveMessage() == #"{"parameters":{}}"#)
            socket.send(UploadFraming.header(100) + Array(records[0].utf8))
            shutdown(socket.fd, Int32(SHUT_RDWR))
            let abandoned = try final(dropped)
            #expect(abandoned?.state == .aborted && abandoned?.imported == 0, "\(String(describing: abandoned))")

            // Upload needs the upgrade flag; another method called with it is refused (it makes no
            // upgrade), then the connection ends (the client meant to stop speaking Varlink).
            #expect(
                try RawSocket.exchange(
                    squasherd.writeSocket,
                    varlinkCall(
                        #"{"method":"io.bugsquasher.Import.Upload","parameters":{"job":"\#(try begin("plain"))"}}"#)
                ).contains("upgrade"))
            let status = try RawSocket(path: squasherd.writeSocket)
            status.send(varlinkCall(#"{"method":"io.bugsquasher.Jobs.Status","upgrade":true}"#))
            let refused = status.receiveMessage()
            #expect(
                refused.contains(#""error":"org.varlink.service.InvalidParameter""#)
                    && refused.contains(#""parameters":{"parameter":"upgrade"}"#), "\(refused)")
            #expect(status.receiveAll().isEmpty)
        }
    }

    @Test("malformed, oversized and forbidden calls close or answer that client alone")
    func hostileClients() async throws {
        try await withDaemon { squasherd in
            let exchange = RawSocket.exchange
            let call = varlinkCall
            #expect(try exchange(squasherd.readSocket, call("{nope")).contains("InvalidParameter"))
            #expect(
                try exchange(squasherd.readSocket, call(#"{"method":"io.bugsquasher.Store.Nope"}"#)).contains(
                    "MethodNotFound"))
            #expect(
                try exchange(squasherd.readSocket, call(#"{"method":"io.bugsquasher.Store.Fetch","parameters":{}}"#))
                    .contains(#""parameter":"entity""#))
            #expect(
                try exchange(
                    squasherd.readSocket, call(#"{"method":"io.bugsquasher.Store.Fetch","parameters":{"entity":7}}"#)
                ).contains("InvalidParameter"))
            // A parameter the method does not declare (a misspelt sort) is named, not ignored.
            let misspelt = try exchange(
                squasherd.readSocket,
                call(#"{"method":"io.bugsquasher.Store.Fetch","parameters":{"entity":"Bug","sortBy":["-key"]}}"#))
            #expect(misspelt.contains("InvalidParameter") && misspelt.contains(#""parameter":"sortBy""#), "\(misspelt)")
            #expect(
                try exchange(
                    squasherd.readSocket,
                    call(#"{"method":"io.bugsquasher.Store.Fetch","parameters":{"entity":"Bug","sort":["-key"]}}"#)
                ).contains(#""ids""#))
            #expect(
                try exchange(
                    squasherd.readSocket, call(#"{"method":"io.bugsquasher.Import.Begin","parameters":{"name":"x"}}"#)
                ).contains("PermissionDenied"))
            #expect(
                try exchange(squasherd.readSocket, call(#"{"method":"io.bugsquasher.Changes.Subscribe"}"#)).contains(
                    "ExpectedMore"))
            // 17 MiB without a terminator (the limit is 16 MiB): answered with the limit, then closed.
            let oversized = try exchange(squasherd.readSocket, [UInt8](repeating: 0x41, count: 17 << 20))
            #expect(
                oversized.contains(#""error":"io.bugsquasher.MessageTooLarge""#)
                    && oversized.contains(#""limit":16777216"#), "\(oversized.prefix(300))")
            // The daemon still answers a well-behaved client.
            #expect(try await squasherd.ctl(["status"]).joined().contains("history token"))
        }
    }
}

@Suite("End to end: an import racing deletes")
struct ImportRacingDeletesTests {
    /// Every bug's ID and title by key.
    private func bugs(_ squasherd: TestDaemon) throws -> [String: (id: String, title: String)] {
        let rows =
            try squasherd.call(
                "io.bugsquasher.Store.Fetch", FetchParameters(entity: "Bug", result: "rows"), as: FetchReply.self
            ).rows ?? []
        var bugs: [String: (id: String, title: String)] = [:]
        for row in rows {
            if case .string(let key)? = row.values["key"], case .string(let title)? = row.values["title"] {
                bugs[key] = (row.id, title)
            }
        }
        return bugs
    }

    /// Another client deletes the bugs it updates, one chunk per record: each record ends in the store,
    /// deleted after its chunk saved it, or rejected.
    @Test("an import racing deletes never counts a record imported and then loses it")
    func importRacingDeletes() async throws {
        try await withDaemon { squasherd in
            let count = 1_000
            try await squasherd.ctl([
                "import", try squasherd.writeRecords("first.ndjson", count: count, prefix: "RD", title: "first").path,
                "--wait",
            ])
            let original = try bugs(squasherd)
            try #require(original.count == count)
            let start = try squasherd.call(
                "io.bugsquasher.Jobs.Status", Empty(), as: StatusReply.self
            ).token
            let second = try squasherd.writeRecords("second.ndjson", count: count, prefix: "RD", title: "second")
            let job = try #require(try await squasherd.ctl(["import", second.path, "--chunk-size", "1"]).last)
            try BlockingVarlinkClient(path: squasherd.readSocket).stream(
                "io.bugsquasher.Jobs.Watch", JobParameter(job: job)
            ) { reply in
                try reply.parameters(JobReply.self).job.imported < 10
            }
            // From the last record down, while the import goes up: they meet on some bugs.
            let deleter = try BlockingVarlinkClient(path: squasherd.writeSocket)
            for n in stride(from: count, through: 1, by: -1) {
                _ = try deleter.call(
                    "io.bugsquasher.Import.Delete", DeleteParameters(id: original["RD-\(n)"]!.id), as: DeleteReply.self)
            }
            try await squasherd.ctl(["jobs", job, "--wait"])
            let ended = try squasherd.call(
                "io.bugsquasher.Jobs.Get", JobParameter(job: job), as: JobReply.self
            ).job
            #expect(ended.recordsRead == Int64(count) && ended.imported + ended.rejected == Int64(count), "\(ended)")
            let rejected = Set(
                try squasherd.call(
                    "io.bugsquasher.Jobs.Rejects", RejectsParameters(job: job), as: RejectsReply.self
                ).rejects.map(\.line))
            // The version each original bug was deleted at: 2 when the import had updated it first.
            var deletedAt: [String: Int64] = [:]
            var after = start
            while true {
                let page = try squasherd.call(
                    "io.bugsquasher.Changes.History", HistoryParameters(after: after, limit: 1_000),
                    as: HistoryReply.self)
                for save in page.saves { for change in save.deleted { deletedAt[change.id] = change.version } }
                guard let last = page.saves.last?.token else { break }
                after = last
            }
            let stored = try bugs(squasherd)
            var recreated = 0
            var lost: [String] = []
            for n in 1...count {
                let key = "RD-\(n)"
                if let bug = stored[key] {
                    #expect(bug.title == "second \(n)", "\(key): \(bug.title)")
                    if bug.id != original[key]!.id { recreated += 1 }
                } else if deletedAt[original[key]!.id] != 2, !rejected.contains(Int64(n)) {
                    lost.append(key)
                }
            }
            #expect(
                lost.isEmpty, "deleted before their chunks saved them, and neither re-created nor rejected: \(lost)")
            print(
                "import racing deletes: \(recreated) bugs re-created by a chunk saved after their deletion, \(count - stored.count) deleted after theirs, \(rejected.count) rejected"
            )
        }
    }
}

@Suite("End to end: aborting an import")
struct AbortEndToEndTests {
    /// The job ends aborted, what it committed stays, its spool file goes, and the daemon goes on editing
    /// (an empty value included) and importing.
    @Test("squasherctl abort stops a running import after its chunk in flight")
    func abortRunningImport() async throws {
        try await withDaemon(chunkSize: 20) { squasherd in
            let count = 20_000
            let (path, records) = try squasherd.writeRecords("big.ndjson", count: count, prefix: "AB", title: "abort")
            // The records, then whatever the test writes: the upload stays open, so the job cannot
            // run, let alone end, before the test watches it, however slow this machine is.
            let input = try ChildPipe()
            let upload = try ChildProcess(
                name: "cat | squasherctl import -", executable: "/bin/sh",
                arguments: ["-c", #"{ cat "$1"; cat; } | "$2" import -"#, "sh", path, Products.squasherctl],
                environment: squasherd.environment, stdin: input.reading)
            try input.reading.close()
            let job = try #require(
                try await poll(for: .seconds(60)) {
                    try? BlockingVarlinkClient(path: squasherd.readSocket).call(
                        "io.bugsquasher.Jobs.List", LimitParameter(limit: 1), as: JobsReply.self
                    ).jobs.first?.id
                }, "the upload did not begin: \(upload.errorOutput)")
            // Strike once the job has committed a few chunks (one Watch reply per commit): the
            // upload ends at the first reply, and the store's writer is asked for in the reply
            // that shows 100 records, so that the import cannot end before the abort reaches it;
            // it stops after the chunk waiting.
            let locker = try StoreLocker(store: squasherd.directory + "/state/bugs.sqlite")
            var uploading = true
            try BlockingVarlinkClient(path: squasherd.readSocket).stream(
                "io.bugsquasher.Jobs.Watch", JobParameter(job: job)
            ) { reply in
                let watched = try reply.parameters(JobReply.self).job
                if uploading {
                    try input.writing.close()
                    uploading = false
                }
                guard watched.imported >= 100 else { return true }
                try locker.requestLock()
                return false
            }
            #expect(try await upload.waitForExit(timeout: .seconds(60)) == 0, "\(upload.errorOutput)")
            try await locker.locked()
            let abort = try squasherd.startCtl("squasherctl abort", ["abort", job])
            try await squasherd.waitForLog("abort requested")
            #expect(try await locker.release() == 0, "\(locker.errorOutput)")
            #expect(try await abort.waitForExit(timeout: .seconds(60)) == 0, "\(abort.errorOutput)")
            let aborted = abort.output
            let summary = try #require(aborted.first)
            #expect(summary.hasPrefix("job \(job) aborted: "), "\(aborted)")
            let ended = try squasherd.call(
                "io.bugsquasher.Jobs.Get", JobParameter(job: job), as: JobReply.self
            ).job
            #expect(ended.state == .aborted)
            #expect(
                ended.imported >= 100 && ended.imported < Int64(count),
                "the abort came after the import ended, or before it began: \(ended)")
            #expect(ended.error?.contains("Aborted on request") == true, "\(String(describing: ended.error))")
            // Chunks commit whole: exactly the records the job counts are in the store.
            let stored = try squasherd.call(
                "io.bugsquasher.Store.Fetch", FetchParameters(entity: "Bug", predicate: #"key BEGINSWITH "AB-""#),
                as: FetchReply.self)
            #expect(Int64(stored.ids?.count ?? -1) == ended.imported)
            #expect(try FileManager.default.contentsOfDirectory(atPath: squasherd.directory + "/state/spool").isEmpty)
            // An ended job cannot be aborted again; an unknown one is not found.
            try await squasherd.ctl(["abort", job], expectStatus: 2)
            try await squasherd.ctl(["abort", "nosuchjob"], expectStatus: 3)
            // An empty value is a value: `details=` stores the empty string.
            try await squasherd.ctl(["update", "AB-1", "details="])
            let row = try await squasherd.ctl(["get", "AB-1", "--json"]).joined()
            #expect(row.contains(#""details":"""#), "\(row)")
            // A to-one relationship takes its destination's unique key, or an object ID of one that
            // exists; either of another object is refused, saying which.
            let other = try squasherd.writeRecords("other.ndjson", count: 1, prefix: "OT", title: "other")
            try await squasherd.ctl(["import", other.path, "--wait"])
            try await squasherd.ctl(["update", "AB-1", "project=OT"])
            #expect(
                try await squasherd.ctl(["list", "--where", #"project.key == "OT""#]).joined(separator: "\n").contains(
                    "AB-1")
            )
            let unknownKey = try await squasherd.ctlError(["update", "AB-1", "project=NOPE"], expectStatus: 3)
            #expect(
                unknownKey.contains("no Project with key NOPE; 'project' takes the key of an existing Project"),
                "\(unknownKey)")
            let project = try #require(
                row.firstMatch(of: /"project":"(x-bugsquasher:[^"]*\/Project\/)p\d+"/)?.1, "\(row)")
            let deletedProject = try await squasherd.ctlError(
                ["update", "AB-1", "project=\(project)p999999"], expectStatus: 2)
            #expect(deletedProject.contains("no Project has that ID (deleted, or never saved)"), "\(deletedProject)")
            try await squasherd.ctl(["update", "AB-1", "project=AB"])
            let otherStore = try await squasherd.ctlError(
                ["update", "AB-1", "project=x-bugsquasher://00000000-0000-0000-0000-000000000000/Project/p1"],
                expectStatus: 2)
            #expect(
                otherStore.contains(
                    "x-bugsquasher://00000000-0000-0000-0000-000000000000/Project/p1' is not an object ID of this store"
                ),
                "\(otherStore)")
            // A required attribute cannot be cleared; the refusal says so as for a blank one.
            let cleared = try await squasherd.ctlError(["update", "AB-1", "title=nil"], expectStatus: 2)
            #expect(
                cleared.contains("'title' is required on a Bug and cannot be cleared (nil); give it a value"),
                "\(cleared)")
            // Usage errors: an empty key, a name given twice, an entity the model does not have.
            try await squasherd.ctl(["get", ""], expectStatus: 64)
            #expect(
                try await squasherd.ctlError(["update", "AB-1", "status=Open", "status=Closed"], expectStatus: 64)
                    .contains(
                        "'status' is given twice"))
            #expect(
                try await squasherd.ctlError(["list", "--entity", "Nope"], expectStatus: 64).contains(
                    "There is no entity 'Nope'"))
            // A value of the wrong type says which form the attribute takes.
            let date = try await squasherd.ctlError(["update", "AB-1", "created=yesterday"], expectStatus: 2)
            #expect(
                date.contains(
                    #"'created' is date; "yesterday" cannot be one. Give a date and time that exist, as ISO 8601 with a time zone: 2012-01-31T09:30:00Z"#
                ), "\(date)")
            // A date or time that does not exist is refused, not rolled over (Foundation's parser
            // made 2020-02-30 March 1st); so is a five-digit year.
            for impossible in [
                "2020-02-30T00:00:00Z", "2021-02-29T12:00:00Z", "2020-01-01T24:00:00Z", "2020-01-01T23:59:61Z",
                "99999-01-01T00:00:00Z",
            ] {
                let refused = try await squasherd.ctlError(
                    ["update", "AB-1", "created=\(impossible)"], expectStatus: 2)
                #expect(
                    refused.contains(
                        #"'created' is date; "\#(impossible)" cannot be one. Give a date and time that exist"#),
                    "\(refused)")
            }
            // So is a date ISO 8601 cannot write with a four-digit year; the first day of year 1 and
            // the last second of 9999 are in.
            let yearZero = try await squasherd.ctlError(
                ["update", "AB-1", "created=0000-06-01T00:00:00Z"], expectStatus: 2)
            #expect(
                yearZero.contains("'created' is date; 0000-06-01T00:00:00Z is outside the years 0001 to 9999"),
                "\(yearZero)")
            try await squasherd.ctl(["update", "AB-1", "created=0001-01-01T00:00:00Z"])
            #expect(
                try await squasherd.ctl(["get", "AB-1", "--json"]).joined().contains(
                    #""created":"0001-01-01T00:00:00.000Z""#)
            )
            try await squasherd.ctl(["update", "AB-1", "created=2024-02-29T23:59:59.500+01:00"])
            #expect(
                try await squasherd.ctl(["get", "AB-1", "--json"]).joined().contains(
                    #""created":"2024-02-29T22:59:59.500Z""#)
            )
            try await squasherd.ctl(["update", "AB-1", "created=9999-12-31T23:59:59Z"])
            // A unique key cannot be emptied, blanked or given to a second bug; each says why.
            for blank in ["key=", "key=   "] {
                let refused = try await squasherd.ctlError(["update", "AB-1", blank], expectStatus: 2)
                #expect(refused.contains("'key' is the unique key of a Bug and cannot be empty or blank"), "\(refused)")
            }
            // Nor given spaces around it: `get AB-1` would not find it any more.
            let padded = try await squasherd.ctlError(["update", "AB-1", "key= AB-1 "], expectStatus: 2)
            #expect(padded.contains(#"'key' is the unique key of a Bug; " AB-1 " has spaces around it"#), "\(padded)")
            // Nor can another required text be blanked (an optional one can).
            let status = try await squasherd.ctlError(["update", "AB-1", "status="], expectStatus: 2)
            #expect(status.contains("'status' is required on a Bug and cannot be empty or blank"), "\(status)")
            try await squasherd.ctl(["update", "AB-1", "details="])
            let taken = try await squasherd.ctlError(["update", "AB-2", "key=AB-1"], expectStatus: 2)
            #expect(
                taken.contains("Another Bug already has key = \"AB-1\". Choose a value no other Bug has"), "\(taken)")
            #expect(try await squasherd.ctl(["get", "AB-2"]).joined().contains("AB-2"))
            // Values that begin with "-" are values: a descending sort, and negative numbers refused
            // by validation (exit 64) instead of read as options.
            let descending = try await squasherd.ctl([
                "list", "--where", #"key BEGINSWITH "AB-""#, "--sort", "-key", "--limit", "3",
            ])
            #expect(descending.count == 3 && descending == descending.sorted(by: >), "\(descending)")
            try await squasherd.ctl(["list", "--limit", "-1"], expectStatus: 64)
            // An empty key path among the sort keys is a usage error, not a sort by nothing.
            for sort in ["", ",,", "key,", "-"] {
                let empty = try await squasherd.ctlError(["list", "--sort", sort], expectStatus: 64)
                #expect(empty.contains("has an empty key path"), "--sort '\(sort)': \(empty)")
            }
            try await squasherd.ctl(["watch", "--since", "-5"], expectStatus: 64)
            let negativeTimeout = try await squasherd.ctlError(["status", "--timeout", "-1"], expectStatus: 64)
            #expect(negativeTimeout.contains("--timeout takes seconds"), "\(negativeTimeout)")
            // A socket path no Unix socket address holds is a usage error too, not an unreachable daemon.
            let longPath = try await squasherd.ctlError(
                ["status", "--socket", "/tmp/" + String(repeating: "s", count: 120) + "/squasherd.sock"],
                expectStatus: 64)
            #expect(longPath.contains("is too long"), "\(longPath)")
            // A predicate with an escape JSON does not have is refused.
            try await squasherd.ctl(["list", "--where", #"key == "\q""#], expectStatus: 2)
            // The runner goes on with the next job.
            try (records.prefix(50).joined(separator: "\n") + "\n").write(
                toFile: squasherd.directory + "/small.ndjson", atomically: true, encoding: .utf8)
            let next = try await squasherd.ctl(["import", squasherd.directory + "/small.ndjson", "--wait"])
            #expect(next.first?.contains("finished: 50 read") == true, "\(next)")
            // Two jobs now: a list cut short says so; an empty job ID is a usage error.
            #expect(try await squasherd.ctl(["jobs", "--limit", "2"]).count == 2)
            let cut = try await squasherd.ctlProcess(["jobs", "--limit", "1"], expectStatus: 0)
            #expect(
                cut.output.count == 1
                    && cut.errorOutput.contains("only the most recent job is shown; there are older ones"),
                "\(cut.output) \(cut.errorOutput)")
            try await squasherd.ctl(["abort", ""], expectStatus: 64)
            // No command at all: the help, on stderr, as a usage error.
            #expect(try await squasherd.ctlError([], expectStatus: 64).contains("SUBCOMMANDS"))
            try await squasherd.ctl(["import", squasherd.directory + "/small.ndjson", "--name", " "], expectStatus: 64)
        }
    }
}

extension AbortEndToEndTests {
    /// It says so, with the commands to follow or stop the job, exits 130, and the job finishes.
    @Test("Ctrl-C of import --wait stops the waiting, not the job")
    func interruptedWait() async throws {
        try await withDaemon(chunkSize: 20) { squasherd in
            // squasherctl follows the job once its upload is committed; on a machine slow enough,
            // the job may end before squasherctl is seen following it. Then it goes again with
            // four times the records (twice at most).
            var count = 20_000
            var waiter: ChildProcess
            var attempt = 1
            while true {
                let path = try squasherd.writeRecords(
                    "big\(attempt).ndjson", count: count, prefix: "CC\(attempt)", title: "interrupted"
                ).path
                waiter = try squasherd.startCtl("import --wait", ["import", path, "--wait"])
                do {
                    try await squasherd.waitForSubscriptions(1, startedBy: waiter, timeout: .seconds(120))
                    break
                } catch let error as HarnessError where waiter.exitStatus == 0 && attempt < 3 {
                    print("import --wait: the job ended before it was followed (\(error)); again, larger")
                }
                count *= 4
                attempt += 1
            }
            // The store's writer is held from here until squasherctl has been interrupted, so that
            // the job cannot end first however slowly the steps between run (its chunk waits).
            let locker = try StoreLocker(store: squasherd.directory + "/state/bugs.sqlite")
            try await locker.lock()
            // A follower of a job is not a subscriber of the change feed.
            let following = try await squasherd.ctl(["status"]).joined(separator: "\n")
            #expect(following.contains("subscribers 0, job followers 1"), "\(following)")
            waiter.signal(SIGINT)
            #expect(try await waiter.waitForExit() == 130)
            #expect(try await locker.release() == 0, "\(locker.errorOutput)")
            let said = waiter.errorOutput
            let job = try #require(said.firstMatch(of: /job (\w+) goes on in squasherd/)?.1, "\(said)")
            #expect(
                said.contains("squasherctl jobs \(job) --wait") && said.contains("squasherctl abort \(job)"), "\(said)")
            // After a retry the job holds 80,000 records in chunks of 20: on a loaded machine (the
            // whole suite on two cores) that takes minutes.
            let follower = try squasherd.startCtl("jobs --wait", ["jobs", String(job), "--wait"])
            #expect(try await follower.waitForExit(timeout: .seconds(600)) == 0)
            let done = follower.output
            #expect(done.last?.contains("finished: \(count) read, \(count) imported") == true, "\(done)")
        }
    }

    /// Its job ends aborted, its spool file goes, later bytes for it are refused, and the connection serves
    /// on.
    @Test("an upload idle for upload_idle_timeout is abandoned")
    func idleUploadAbandoned() async throws {
        try await withDaemon(configuration: "upload_idle_timeout = 1\n") { squasherd in
            let write = try BlockingVarlinkClient(path: squasherd.writeSocket)
            let job = try write.call(
                "io.bugsquasher.Import.Begin", BeginImportParameters(name: "hangs", format: nil, chunkSize: nil),
                as: JobParameter.self
            ).job
            let first = Data(#"{"key":"IDLE-1","title":"t","status":"Open","project":{"key":"IDLE"}}"#.utf8 + [0x0A])
                .base64EncodedString()
            _ = try write.call(
                "io.bugsquasher.Import.Append", AppendParameters(job: job, data: first), as: BytesReply.self)
            // The client now hangs with the upload open; the job ends by itself.
            let waiter = try squasherd.startCtl("jobs --wait", ["jobs", job, "--wait"])
            #expect(try await waiter.waitForExit(timeout: .seconds(30)) == 2)
            #expect(waiter.output.first?.hasPrefix("job \(job) aborted: ") == true, "\(waiter.output)")
            #expect(waiter.errorOutput.contains("No bytes arrived for 1 s"), "\(waiter.errorOutput)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: squasherd.directory + "/state/spool").isEmpty)
            try await squasherd.waitForLog("upload abandoned: idle too long")
            // Another write connection can abort an upload, but not feed or commit it.
            let owned = try write.call(
                "io.bugsquasher.Import.Begin", BeginImportParameters(name: "owned", format: nil, chunkSize: nil),
                as: JobParameter.self
            ).job
            let intruder = try BlockingVarlinkClient(path: squasherd.writeSocket)
            for (method, parameters) in [
                ("io.bugsquasher.Import.Append", #"{"job":"\#(owned)","data":"\#(first)"}"#),
                ("io.bugsquasher.Import.Commit", #"{"job":"\#(owned)"}"#),
            ] {
                let intrusion = #expect(throws: VarlinkError.self) {
                    _ = try intruder.call(
                        method, try JSONDecoder().decode(JSONValue.self, from: Data(parameters.utf8)),
                        as: JSONValue.self)
                }
                #expect(
                    intrusion?.parameters["message"]?.stringValue?.contains("was begun on another connection") == true,
                    "\(method): \(String(describing: intrusion))")
            }
            _ = try write.call(
                "io.bugsquasher.Import.Append", AppendParameters(job: owned, data: first), as: BytesReply.self)
            _ = try intruder.call("io.bugsquasher.Import.Abort", JobParameter(job: owned), as: JSONValue.self)
            try await squasherd.waitForLog("upload aborted on request")
            // The hung client's next bytes are refused, saying the upload has ended, on a connection
            // that still works.
            let refused = #expect(throws: VarlinkError.self) {
                _ = try write.call(
                    "io.bugsquasher.Import.Append", AppendParameters(job: job, data: first), as: BytesReply.self)
            }
            #expect(refused?.name == "io.bugsquasher.Import.InvalidInput", "\(String(describing: refused))")
            #expect(
                refused?.parameters["message"]?.stringValue?.contains("is aborted: its upload has ended") == true,
                "\(String(describing: refused))")

            // A client sending over an upgraded connection gets the reason as soon as the upload is
            // abandoned, without sending anything more, and the connection ends.
            // (Bounded: without that reply, the client would give up after 30 s.)
            let sender = try BlockingVarlinkClient(path: squasherd.writeSocket, timeout: .seconds(30))
            let upgraded = try sender.call(
                "io.bugsquasher.Import.Begin", BeginImportParameters(name: "hangs too", format: nil, chunkSize: nil),
                as: JobParameter.self
            ).job
            let upgradedWaiter = try squasherd.startCtl("jobs --wait", ["jobs", upgraded, "--wait"])
            let answer = try await onOwnThread {
                try sender.upgrade("io.bugsquasher.Import.Upload", JobParameter(job: upgraded)) { connection in
                    let bytes = Array(Data(base64Encoded: first)!)
                    try (UploadFraming.header(bytes.count) + bytes).withUnsafeBytes { try connection.send($0) }
                    return try connection.receiveReply()
                }
            }
            #expect(try await upgradedWaiter.waitForExit(timeout: .seconds(30)) == 2, "\(upgradedWaiter.errorOutput)")
            #expect(
                answer.error?.parameters["message"]?.stringValue?.contains("No bytes arrived for 1 s") == true,
                "\(String(describing: answer.error))")
        }
    }

    /// A steady slow producer is not taken for idle; an upload abandoned while its input stalls is reported
    /// at once.
    @Test("import - streams a slow producer's lines and reports a stalled upload at once")
    func slowAndStalledStandardInput() async throws {
        try await withDaemon(configuration: "upload_idle_timeout = 3\n") { squasherd in
            let line = { (n: Int) in
                Data(#"{"key":"SLOW-\#(n)","title":"t","status":"Open","project":{"key":"SLOW"}}"#.utf8 + [0x0A])
            }
            // A line every half second for 5 s, from a process of its own: longer than the idle
            // timeout in all, never idle for long.
            let lines = squasherd.directory + "/slow.ndjson"
            try (1...10).map(line).reduce(Data(), +).write(to: URL(filePath: lines))
            let steadyImport = try ChildProcess(
                name: "slow producer | squasherctl import -", executable: "/bin/sh",
                arguments: [
                    "-c",
                    #"while IFS= read -r line; do printf '%s\n' "$line"; sleep 0.5; done < "$1" | "$2" import - --wait"#,
                    "sh", lines, Products.squasherctl,
                ], environment: ["SQUASHERD_RUNTIME_DIRECTORY": squasherd.directory + "/run"])
            #expect(try await steadyImport.waitForExit(timeout: .seconds(60)) == 0, "\(steadyImport.errorOutput)")
            #expect(
                steadyImport.output.first?.contains("finished: 10 read, 10 imported") == true, "\(steadyImport.output)")
            // A producer that stalls with its pipe open: squasherctl says why the upload ended as
            // soon as squasherd abandons it, not when the pipe next moves (here, never).
            let stalled = try ChildPipe()
            let stalledImport = try ChildProcess(
                name: "squasherctl import -", executable: Products.squasherctl, arguments: ["import", "-", "--wait"],
                environment: ["SQUASHERD_RUNTIME_DIRECTORY": squasherd.directory + "/run"], stdin: stalled.reading)
            stalled.writing.write(line(11))
            #expect(try await stalledImport.waitForExit(timeout: .seconds(30)) == 2, "\(stalledImport.errorOutput)")
            #expect(
                stalledImport.errorOutput.contains("No bytes arrived for 3 s, so the upload was abandoned"),
                "\(stalledImport.errorOutput)")
            withExtendedLifetime(stalled) {}
        }
    }

    /// Busy is squasherctl's 75 (retry later) and creates no job; once one upload is aborted, the next goes
    /// through.
    @Test("at most 64 uploads run at once; a Begin beyond them is answered Busy")
    func uploadsBeyondTheLimitAreBusy() async throws {
        try await withDaemon { squasherd in
            let write = try BlockingVarlinkClient(path: squasherd.writeSocket)
            let held = try (1...64).map {
                try write.call(
                    "io.bugsquasher.Import.Begin",
                    BeginImportParameters(name: "held \($0)", format: nil, chunkSize: nil),
                    as: JobParameter.self
                ).job
            }
            let refused = #expect(throws: VarlinkError.self) {
                _ = try write.call(
                    "io.bugsquasher.Import.Begin",
                    BeginImportParameters(name: "one too many", format: nil, chunkSize: nil),
                    as: JobParameter.self)
            }
            #expect(refused?.name == "io.bugsquasher.Import.Busy", "\(String(describing: refused))")
            #expect(
                refused?.parameters["message"]?.stringValue?.contains("64 uploads are in progress") == true,
                "\(String(describing: refused))")
            let records = try squasherd.writeRecords("busy.ndjson", count: 5, prefix: "BSY", title: "after the limit")
            let error = try await squasherd.ctlError(["import", records.path, "--wait"], expectStatus: 75)
            #expect(
                error.contains("64 uploads are in progress")
                    && error.contains("once one of them is committed or aborted"),
                "\(error)")
            // Refused before any job was made: the 64 held ones are all there is.
            let listed = try await squasherd.ctl(["jobs", "--limit", "100"])
            #expect(listed.count == 64 && !listed.joined().contains("one too many"), "\(listed)")
            _ = try write.call("io.bugsquasher.Import.Abort", JobParameter(job: held[0]), as: JSONValue.self)
            let done = try await squasherd.ctl(["import", records.path, "--wait"])
            #expect(done.last?.contains("finished: 5 read, 5 imported") == true, "\(done)")
        }
    }

    /// Not as a client that went away; a `jobs --wait` that finds squasherd back on another store says so.
    @Test("an upload cut off by stopping squasherd is recorded as such")
    func uploadCutOffByStop() async throws {
        try await withDaemon { squasherd in
            let first = Data(#"{"key":"CUT-1","title":"t","status":"Open","project":{"key":"CUT"}}"#.utf8 + [0x0A])
                .base64EncodedString()
            // The upload lives as long as the connection that began it: the caller keeps the client.
            func beginUpload() throws -> (job: String, client: BlockingVarlinkClient) {
                let write = try BlockingVarlinkClient(path: squasherd.writeSocket)
                let job = try write.call(
                    "io.bugsquasher.Import.Begin", BeginImportParameters(name: "cut", format: nil, chunkSize: nil),
                    as: JobParameter.self
                ).job
                _ = try write.call(
                    "io.bugsquasher.Import.Append", AppendParameters(job: job, data: first), as: BytesReply.self)
                return (job, write)
            }
            let (job, client) = try beginUpload()
            // A client sending over an upgraded connection, waiting on its input when squasherd
            // stops, is told why the upload ended instead of finding the connection closed.
            let upgradedClient = try BlockingVarlinkClient(path: squasherd.writeSocket, timeout: .seconds(30))
            let upgradedJob = try upgradedClient.call(
                "io.bugsquasher.Import.Begin", BeginImportParameters(name: "cut too", format: nil, chunkSize: nil),
                as: JobParameter.self
            ).job
            let (sending, sendingSignal) = AsyncStream.makeStream(of: Void.self)
            let cutReply = Task {
                try await onOwnThread {
                    try upgradedClient.upgrade("io.bugsquasher.Import.Upload", JobParameter(job: upgradedJob)) {
                        connection in
                        let bytes = Array(Data(base64Encoded: first)!)
                        try (UploadFraming.header(bytes.count) + bytes).withUnsafeBytes { try connection.send($0) }
                        sendingSignal.finish()
                        return try connection.receiveReply()
                    }
                }
            }
            for await _ in sending {}
            #expect(try await squasherd.stop() == 0)
            withExtendedLifetime(client) {}
            let cut = try await cutReply.value
            #expect(
                cut.error?.name == "io.bugsquasher.Import.Busy"
                    && cut.error?.parameters["message"]?.stringValue?.contains("squasherd is stopping") == true,
                "\(String(describing: cut.error))")
            #expect(
                squasherd.process.errorOutput.contains("upload abandoned: squasherd is stopping"),
                "\(squasherd.process.errorOutput.suffix(2000))")
            try await squasherd.restart()
            for job in [job, upgradedJob] {
                let ended = try squasherd.call("io.bugsquasher.Jobs.Get", JobParameter(job: job), as: JobReply.self).job
                #expect(
                    ended.state == .aborted
                        && ended.error?.contains("squasherd stopped before the upload was committed") == true,
                    "\(ended)")
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: squasherd.directory + "/state/spool").isEmpty)

            // A job left unfinished by a kill -9, and squasherd back on another state directory: the
            // waiter names the store change instead of only "no job".
            let (second, secondClient) = try beginUpload()
            let waiter = try squasherd.startCtl("jobs --wait", ["jobs", second, "--wait"])
            try await squasherd.waitForSubscriptions(1, startedBy: waiter)
            squasherd.process.signal(SIGKILL)
            _ = try await squasherd.process.waitForExit()
            withExtendedLifetime(secondClient) {}
            try await squasherd.restart(stateDirectory: "other")
            #expect(try await waiter.waitForExit(timeout: .seconds(30)) == 3)
            #expect(waiter.errorOutput.contains("squasherd came back serving another store"), "\(waiter.errorOutput)")
        }
    }
}

@Suite("End to end: results larger than one reply")
struct PagingEndToEndTests {
    /// Renames to the keys it is about to insert, again and again; every record is imported or rejected
    /// with a reason.
    @Test("edits racing an import on its bugs never fail the job")
    func editsRacingAnImport() async throws {
        try await withDaemon(chunkSize: 100) { squasherd in
            let editors = 4
            try await squasherd.ctl([
                "import",
                try squasherd.writeRecords("edited.ndjson", count: editors, prefix: "EDIT", title: "edited").path,
                "--wait",
            ])
            let count = 3_000
            let input = try squasherd.writeRecords("race.ndjson", count: count, prefix: "RACE", title: "imported")
            let ids = try (1...editors).map { n in
                try #require(
                    try squasherd.call(
                        "io.bugsquasher.Store.Fetch",
                        FetchParameters(entity: "Bug", predicate: #"key == "EDIT-\#(n)""#),
                        as: FetchReply.self
                    ).ids?.first)
            }
            let importer = try squasherd.startCtl("import", ["import", input.path, "--wait"])
            // Each editor renames its bug, again and again, to a key the import reads next: the
            // chunk then either finds that bug under the key (and updates it) or meets it at save
            // time (a unique key taken, or a bug edited since it was loaded), and resolves it.
            let stop = Atomic<Bool>(false)
            let renames = Atomic<Int>(0)
            let threads = ids.enumerated().map { number, id in
                Thread {
                    guard let read = try? BlockingVarlinkClient(path: squasherd.readSocket),
                        let write = try? BlockingVarlinkClient(path: squasherd.writeSocket)
                    else { return }
                    var generator = SystemRandomNumberGenerator()
                    while !stop.load(ordering: .relaxed) {
                        let status = try? read.call(
                            "io.bugsquasher.Jobs.Status", [String: String](), as: StatusReply.self)
                        let next = Int(status?.activeJob?.recordsRead ?? 0) + Int.random(in: 1...200, using: &generator)
                        if (try? write.call(
                            "io.bugsquasher.Import.Update",
                            UpdateParameters(
                                id: id, values: ["key": .string("RACE-\(next)"), "title": .string("edit \(number)")]),
                            as: UpdateReply.self)) != nil
                        {
                            renames.add(1, ordering: .relaxed)
                        }
                    }
                }
            }
            for thread in threads { thread.start() }
            let status = try await importer.waitForExit(timeout: .seconds(300))
            stop.store(true, ordering: .relaxed)
            #expect(status == 0, "\(importer.output) \(importer.errorOutput)")
            let line = importer.output.first { $0.hasPrefix("job ") } ?? importer.output.joined(separator: "\n")
            #expect(line.contains("finished: \(count) read"), "\(line)")
            // Read, imported, rejected: the last three numbers before the duration (" in 1.2 s …").
            let counts = line.components(separatedBy: " in ").first ?? line
            let numbers = counts.split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }
            #expect(
                numbers.suffix(3).count == 3 && numbers.suffix(2).reduce(0, +) == count,
                "imported + rejected = read: \(line)")
            #expect(renames.load(ordering: .relaxed) > 0)
            #expect(
                !squasherd.process.errorOutput.contains("import failed"),
                "\(squasherd.process.errorOutput.suffix(2_000))")
            print(
                "racing edits: \(renames.load(ordering: .relaxed)) renames; \(line); chunks imported one by one: \(squasherd.process.errorOutput.components(separatedBy: "one by one").count - 1)"
            )
        }
    }

    /// squasherd says so; squasherctl list and a library fetch page to the whole result, and --limit still
    /// limits; output that cannot be written exits 74.
    @Test("replies are capped at 10,000 rows; list and fetch page past the cap")
    func pagesPastTheCap() async throws {
        try await withDaemon { squasherd in
            let count = 10_050
            let records = (1...count).map {
                #"{"key":"PG-\#(String(format: "%05d", $0))","title":"page \#($0)","status":"Open","project":{"key":"PG"}}"#
            }
            try (records.joined(separator: "\n") + "\n").write(
                toFile: squasherd.directory + "/many.ndjson", atomically: true, encoding: .utf8)
            let imported = try await squasherd.ctl(["import", squasherd.directory + "/many.ndjson", "--wait"])
            #expect(imported.last?.contains("\(count) imported") == true, "\(imported)")

            // One call: capped, and marked as cut. (The rows are counted, not decoded: decoding
            // 10,000 rows takes seconds in a debug build.)
            struct Page: Decodable {
                struct Row: Decodable {}
                var rows: [Row]
                var more: Bool?
            }
            let capped = try squasherd.call(
                "io.bugsquasher.Store.Fetch", FetchParameters(entity: "Bug", result: "rows"), as: Page.self)
            #expect(capped.rows.count == 10_000)
            #expect(capped.more == true)
            let rest = try squasherd.call(
                "io.bugsquasher.Store.Fetch", FetchParameters(entity: "Bug", offset: 10_000, result: "rows"),
                as: Page.self)
            #expect(rest.rows.count == 50)
            #expect(rest.more == nil)

            let all = try await squasherd.ctl(["list", "--sort", "key", "--limit", "1000000"])
            #expect(all.count == count)
            #expect(
                all.first?.hasPrefix("PG-00001 ") == true && all.last?.hasPrefix("PG-10050 ") == true,
                "\(all.prefix(1)) … \(all.suffix(1))")
            #expect(Set(all).count == count)
            let window = try await squasherd.ctl(["list", "--sort", "key", "--limit", "10002", "--offset", "45"])
            #expect(window.count == 10_002)
            #expect(window.first?.hasPrefix("PG-00046 ") == true && window.last?.hasPrefix("PG-10047 ") == true)
            let json = try await squasherd.ctl([
                "list", "--json", "--sort", "key", "--limit", "20000", "--offset", "10040",
            ])
            .joined()
            #expect(json.components(separatedBy: #""key":"PG-"#).count - 1 == 10, "\(json)")
            // Output that cannot be written (a full disk) is an error, not a success with part of it.
            let full = try ChildProcess(
                name: "squasherctl list > /dev/full", executable: "/bin/sh",
                arguments: ["-c", "exec \"$0\" list --limit 20000 > /dev/full", Products.squasherctl],
                environment: ["SQUASHERD_RUNTIME_DIRECTORY": squasherd.directory + "/run"])
            #expect(try await full.waitForExit(timeout: .seconds(120)) == 74)
            #expect(
                full.errorOutput.contains("could not write all of its output to standard output"), "\(full.errorOutput)"
            )

            // The library's remote store pages too.
            let subscriber = try Subscriber(socketPath: squasherd.readSocket)
            let fetched = try await subscriber.context.perform { context in
                try context.fetch(FetchRequest<BugSquasherModel.Bug>()).count
            }
            #expect(fetched == count)
            // A to-many relationship is read in pages too: the project's bugs, from an offset.
            let (project, bugs) = try await subscriber.context.perform { context in
                let project = try #require(
                    try context.fetch(FetchRequest<Project>(predicate: Key("key") == "PG")).first)
                return (project.objectID, project.bugs.count)
            }
            #expect(bugs == count)
            let tail = try squasherd.call(
                "io.bugsquasher.Store.Related",
                RelatedParameters(id: project.uriString, relationship: "bugs", offset: 10_000), as: IDsReply.self)
            #expect(tail.ids.count == count - 10_000 && tail.more == nil)
        }
    }
}
