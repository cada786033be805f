import BugSquasherGraph
import BugSquasherPostgres
import BugSquasherProtocol
import BugSquasherVarlink
import Foundation
import Synchronization
import Testing

@testable import BugSquasherDaemon

@Suite("Notification hub")
struct SubscriptionTests {
    func id(_ n: Int64, _ entity: String = "Bug") -> ObjectID { ObjectID(store: "S", entity: entity, primaryKey: n) }

    func save(_ token: Int64, updated: [Int64] = [], inserted: [Int64] = [], deleted: [Int64] = []) -> DidSave {
        DidSave(
            token: HistoryToken(rawValue: token), storeIdentifier: "S",
            inserted: inserted.map { ObjectChange(objectID: id($0), version: 1, changedKeys: []) },
            updated: updated.map { ObjectChange(objectID: id($0), version: token, changedKeys: ["status"]) },
            deleted: deleted.map { ObjectChange(objectID: id($0), version: token, changedKeys: []) }
        )
    }

    /// Behind means more than eight saves pending; one that keeps up is not held.
    @Test("a subscriber that fell behind waits out an interactive save's window")
    func behindWaitsOutTheWindow() async throws {
        let window = Duration.milliseconds(400)
        let editsFirst = EditsFirst(window: window)
        let keepingUp = Subscription(
            registeredOnly: false, includeValues: false, pendingLimit: 1_000, startToken: .zero)
        let behind = Subscription(registeredOnly: false, includeValues: false, pendingLimit: 1_000, startToken: .zero)
        keepingUp.offer(save(1, inserted: [1]))
        for token in Int64(1)...9 { behind.offer(save(token, inserted: [token])) }
        #expect(!keepingUp.isBehind)
        #expect(behind.isBehind)
        editsFirst.openWindow()
        let start = ContinuousClock.now
        await keepingUp.catchUpAfterInteractiveSaves(editsFirst)
        #expect(ContinuousClock.now - start < window / 2, "a subscriber that keeps up was held")
        await behind.catchUpAfterInteractiveSaves(editsFirst)
        #expect(ContinuousClock.now - start >= window * 0.9, "a subscriber behind was caught up inside the window")
        // Once the window is over, nothing waits.
        let after = ContinuousClock.now
        await behind.catchUpAfterInteractiveSaves(editsFirst)
        #expect(ContinuousClock.now - after < window / 2)
        guard case .save(let merged, _)? = await behind.next() else {
            Issue.record("no save")
            return
        }
        #expect(merged.token.rawValue == 9)
    }

    @Test("a registered-only subscriber gets only its registered updates and deletes")
    func filtering() async throws {
        let subscription = Subscription(
            registeredOnly: true, includeValues: false, pendingLimit: 100, startToken: .zero)
        _ = try subscription.register([id(1), id(2), id(2)])
        subscription.offer(save(1, updated: [1, 3, 4], inserted: [9]))
        subscription.offer(save(2, updated: [5]))
        subscription.offer(save(3, deleted: [2, 6]))
        guard case .save(let first, let live)? = await subscription.next() else {
            Issue.record("no save")
            return
        }
        // Save 2 had nothing for this subscriber: save 1 carries its token, so the subscriber's
        // position moves past it. Each pending save is delivered on its own.
        #expect(first.token.rawValue == 2)
        #expect(live)
        #expect(first.updated.map(\.objectID) == [id(1)])
        #expect(first.deleted.isEmpty)
        #expect(first.inserted.isEmpty)
        guard case .save(let second, _)? = await subscription.next() else {
            Issue.record("no second save")
            return
        }
        #expect(second.token.rawValue == 3)
        #expect(second.updated.isEmpty)
        #expect(second.deleted.map(\.objectID) == [id(2)])
        #expect(subscription.unregister([id(2)]) == 1)
        #expect(subscription.unregister([id(2)]) == 1)
        #expect(try subscription.register([id(1)]) == 1)
    }

    /// The task is left waiting. A save the connection refuses goes to the task, and so does everything
    /// after it until the task waits again.
    @Test("a live save for a waiting feed is written by the publisher itself")
    func sentNowByThePublisher() async throws {
        let subscription = Subscription(
            registeredOnly: true, includeValues: false, pendingLimit: 100, startToken: .zero)
        _ = try subscription.register([id(1)])
        let sent = Mutex<[Int64]>([])
        let accepting = Atomic<Bool>(true)
        subscription.sendsNow { save in
            guard accepting.load(ordering: .relaxed) else { return false }
            sent.withLock { $0.append(save.token.rawValue) }
            return true
        }
        // Before the task waits, saves are queued for it as before.
        subscription.offer(save(1, updated: [1]))
        guard case .save(let first, _)? = await subscription.next() else {
            Issue.record("no save")
            return
        }
        #expect(first.token.rawValue == 1)
        let task = Task { await subscription.next() }
        // Wait until the task waits (no pending save): the next offer is written directly.
        while !subscription.hasWaiter { await Task.yield() }
        subscription.offer(save(2, updated: [1]))
        subscription.offer(save(3, updated: [2]))  // nothing for this subscriber
        subscription.offer(save(4, updated: [1]))
        #expect(sent.withLock { $0 } == [2, 4])
        #expect(subscription.deliveredToken.rawValue == 4)
        #expect(subscription.hasWaiter)
        // The connection is full: the save wakes the task.
        accepting.store(false, ordering: .relaxed)
        subscription.offer(save(5, updated: [1]))
        guard case .save(let woken, let live)? = await task.value else {
            Issue.record("the task was not woken")
            return
        }
        #expect(woken.token.rawValue == 5)
        #expect(live)
        #expect(sent.withLock { $0 } == [2, 4])
        // With the connection free again, saves offered while the task is busy still queue for it, in order.
        accepting.store(true, ordering: .relaxed)
        subscription.offer(save(6, updated: [1]))
        guard case .save(let queued, _)? = await subscription.next() else {
            Issue.record("no queued save")
            return
        }
        #expect(queued.token.rawValue == 6)
        #expect(sent.withLock { $0 } == [2, 4])
        subscription.close()
    }

    /// Both from the hub's shared index and checked one by one (a replay); with other predicates too.
    @Test("an insert watch lets through the inserts it waits for and no others")
    func insertWatch() async throws {
        let entity = EntityDescription(
            name: "Bug",
            attributes: [
                AttributeDescription(name: "title", type: .string), AttributeDescription(name: "key", type: .string),
            ])
        func inserting(_ token: Int64, _ keys: [String?]) -> DidSave {
            DidSave(
                token: HistoryToken(rawValue: token), storeIdentifier: "S",
                inserted: keys.enumerated().map { n, key in
                    ObjectChange(
                        objectID: id(Int64(n + 1)), version: 1, changedKeys: [],
                        values: key.map { RowSnapshot(version: 1, attributes: ["t", .string($0)], toOne: []) })
                } + [
                    ObjectChange(
                        objectID: id(99, "Project"), version: 1, changedKeys: [],
                        values: RowSnapshot(version: 1, attributes: ["x", "B-2"], toOne: []))
                ])
        }
        let keys: [String?] = ["B-1", "B-2", "CAF\u{C9}", "B-3", nil, "B-2"]
        let watched = InsertWatch(entity: entity, predicate: Key("key").in(["B-3", "B-2", "CAFE\u{301}"]))
        let hub = NotificationHub()
        let subscription = Subscription(
            registeredOnly: true, includeValues: true, pendingLimit: 100, insertWatch: watched, startToken: .zero)
        hub.add(subscription)
        hub.publish(inserting(1, keys))
        guard case .save(let fromHub, _)? = await subscription.next() else {
            Issue.record("no save")
            return
        }
        // B-2 (twice) and B-3 in their order, and the insert without values (the subscriber
        // checks it); not the other Unicode form of a key, nor a Project with that value.
        #expect(fromHub.inserted.map(\.objectID) == [id(2), id(4), id(5), id(6)])
        #expect(
            Subscription.filter(inserting(2, keys), to: [:], inserts: watched).inserted.map(\.objectID) == [
                id(2), id(4), id(5), id(6),
            ])

        let prefix = InsertWatch(entity: entity, predicate: Key("key").beginsWith("B-") && Key("title") == "t")
        #expect(
            Subscription.filter(inserting(3, keys), to: [:], inserts: prefix, index: SaveIndex(inserting(3, keys)))
                .inserted.map(\.objectID) == [id(1), id(2), id(4), id(5), id(6)])
        #expect(Subscription.filter(inserting(4, keys), to: [:]).inserted.isEmpty)
    }

    /// Such as a bug renamed to a key waited for. Other updates do not pass, nor one the subscriber holds
    /// twice.
    @Test("an insert watch also lets through an update that makes an object match")
    func updateComesToMatchWatch() async throws {
        let entity = EntityDescription(
            name: "Bug",
            attributes: [
                AttributeDescription(name: "title", type: .string), AttributeDescription(name: "key", type: .string),
            ])
        func updating(_ token: Int64, _ changes: [(Int64, String, [String])]) -> DidSave {
            DidSave(
                token: HistoryToken(rawValue: token), storeIdentifier: "S",
                updated: changes.map { n, key, changed in
                    ObjectChange(
                        objectID: id(n), version: token, changedKeys: changed,
                        values: RowSnapshot(version: token, attributes: ["t", .string(key)], toOne: []))
                })
        }
        let watched = InsertWatch(entity: entity, predicate: Key("key").in(["W-1"]))
        // Bug 1 renamed to the key waited for; bug 2 renamed to another key; bug 3 retitled while
        // its key is the one waited for (it was there all along: fetched, not waited for); bug 4
        // is held and renamed.
        let save = updating(1, [(1, "W-1", ["key"]), (2, "W-2", ["key"]), (3, "W-1", ["title"]), (4, "W-1", ["key"])])
        for index in [nil, SaveIndex(save)] {
            let filtered = Subscription.filter(save, to: [id(4): .values], inserts: watched, index: index)
            #expect(filtered.updated.map(\.objectID) == [id(1), id(4)], "index: \(index != nil)")
        }
        // Through the hub, to a subscriber that holds nothing yet.
        let hub = NotificationHub()
        let subscription = Subscription(
            registeredOnly: true, includeValues: true, pendingLimit: 100, insertWatch: watched, startToken: .zero)
        hub.add(subscription)
        hub.publish(updating(2, [(7, "W-1", ["key", "title"]), (8, "W-3", ["key"])]))
        guard case .save(let delivered, _)? = await subscription.next() else {
            Issue.record("no save")
            return
        }
        #expect(delivered.updated.map(\.objectID) == [id(7)])
        // A watch of every insert of an entity has nothing an update could come to match.
        #expect(
            Subscription.filter(save, to: [:], inserts: InsertWatch(entity: entity, predicate: nil)).updated.isEmpty)
    }

    /// What a shared store screens other daemons' inserts by: nothing when no one watches, the watches'
    /// key lists joined into one, every insert for a watch without a predicate or an unfiltered
    /// subscriber.
    @Test("the hub tells a shared store which inserts its subscribers look for")
    func insertInterest() {
        let entity = EntityDescription(
            name: "Bug",
            attributes: [
                AttributeDescription(name: "title", type: .string), AttributeDescription(name: "key", type: .string),
            ])
        let hub = NotificationHub()
        func watching(_ predicate: ObjectPredicate?, on name: String = "Bug") -> Subscription {
            let watch = InsertWatch(
                entity: name == "Bug" ? entity : EntityDescription(name: name, attributes: []), predicate: predicate)
            let subscription = Subscription(
                registeredOnly: true, includeValues: false, pendingLimit: 100, insertWatch: watch, startToken: .zero)
            hub.add(subscription)
            return subscription
        }
        #expect(hub.insertInterest(of: "Bug") == InsertInterest.none)
        let holding = Subscription(registeredOnly: true, includeValues: false, pendingLimit: 100, startToken: .zero)
        hub.add(holding)
        _ = watching(nil, on: "Project")
        #expect(hub.insertInterest(of: "Bug") == InsertInterest.none)
        let first = watching(Key("key").in(["B-1", "B-2"]))
        _ = watching(Key("key").in(["B-2", "B-3"]))
        // Subscribers are kept unordered: so are the keys of the joined list.
        func keys(_ predicate: ObjectPredicate?) -> Set<Value>? {
            guard case .isIn(keyPath: "key", let values)? = predicate, values.count == Set(values).count else {
                return nil
            }
            return Set(values)
        }
        guard case .matching(let joined) = hub.insertInterest(of: "Bug") else {
            Issue.record("not screened by a predicate")
            return
        }
        #expect(keys(joined) == ["B-1", "B-2", "B-3"])
        let prefix = Key("title").beginsWith("crash")
        _ = watching(prefix)
        guard case .matching(.or(let parts)) = hub.insertInterest(of: "Bug"), parts.count == 2 else {
            Issue.record("not one predicate of two parts")
            return
        }
        #expect(keys(parts[0]) == ["B-1", "B-2", "B-3"] && parts[1] == prefix)
        #expect(hub.insertInterest(of: "Project") == .every)
        hub.remove(first)
        let unfiltered = Subscription(registeredOnly: false, includeValues: false, pendingLimit: 100, startToken: .zero)
        hub.add(unfiltered)
        #expect(hub.insertInterest(of: "Bug") == .every)
    }

    /// A fault is registered with version 0; updates come once it is registered with a version. Without
    /// versions, every change comes.
    @Test("an object registered as a fault gets its deletion but no updates")
    func faultRegistrations() async throws {
        let subscription = Subscription(
            registeredOnly: true, includeValues: false, pendingLimit: 100, startToken: .zero)
        _ = try subscription.register([id(1), id(2), id(3)], versions: [0, 4, 0])
        _ = try subscription.register([id(4)])
        subscription.offer(save(1, updated: [1, 2, 3, 4]))
        subscription.offer(save(2, deleted: [3]))
        guard case .save(let first, _)? = await subscription.next() else {
            Issue.record("no save")
            return
        }
        #expect(first.updated.map(\.objectID) == [id(2), id(4)])
        guard case .save(let second, _)? = await subscription.next() else {
            Issue.record("no second save")
            return
        }
        #expect(second.deleted.map(\.objectID) == [id(3)])
        // The fault loaded: registered again with its version, its updates are sent. Registering
        // a held object as a fault again does not take them away.
        _ = try subscription.register([id(1), id(2)], versions: [7, 0])
        subscription.offer(save(3, updated: [1, 2]))
        guard case .save(let third, _)? = await subscription.next() else {
            Issue.record("no third save")
            return
        }
        #expect(third.updated.map(\.objectID) == [id(1), id(2)])
    }

    /// With fewer registrations than changes it walks the registrations; either way the order is the
    /// save's.
    @Test("filtering through the save's shared index gives the direct result, in order")
    func indexedFilter() {
        let big = save(1, updated: Array(stride(from: 40, through: 1, by: -1)), deleted: [50, 41, 42])
        let few: [ObjectID: Subscription.Hold] = [
            id(3): .values, id(30): .values, id(7): .fault, id(42): .fault, id(41): .values, id(99): .values,
        ]
        let many = Dictionary(
            uniqueKeysWithValues: (1...60).map { (id(Int64($0)), $0 % 3 == 0 ? Subscription.Hold.fault : .values) })
        let index = SaveIndex(big)
        for registered in [few, many, [:]] {
            let direct = Subscription.filter(big, to: registered)
            let indexed = Subscription.filter(big, to: registered, index: index)
            #expect(indexed.updated.map(\.objectID) == direct.updated.map(\.objectID))
            #expect(indexed.deleted.map(\.objectID) == direct.deleted.map(\.objectID))
        }
        // Faults get deletions, not updates; the order is the save's (40 … 1; 41 before 42).
        let filtered = Subscription.filter(big, to: few, index: index)
        #expect(filtered.updated.map(\.objectID) == [id(30), id(3)])
        #expect(filtered.deleted.map(\.objectID) == [id(41), id(42)])
    }

    @Test("coalescing keeps the newest version of each object; insert then delete cancels out")
    func coalescing() {
        var coalesced = CoalescedSaves(storeIdentifier: "S")
        for save in [
            save(1, inserted: [7]), save(2, updated: [1]), save(3, updated: [1], deleted: [7]), save(4, updated: [2]),
        ] { coalesced.add(save) }
        let merged = coalesced.result()
        #expect(merged.token.rawValue == 4)
        #expect(merged.inserted.isEmpty)
        #expect(merged.deleted.isEmpty)
        #expect(merged.updated.map(\.objectID) == [id(1), id(2)])
        #expect(merged.updated.first?.version == 3)
    }

    /// Each list is encoded once for every subscriber; updates are merged by object.
    @Test("an import's disjoint saves are merged by concatenating their inserted lists")
    func disjointImportSaves() async {
        let subscribers = (0..<2).map { _ in
            Subscription(registeredOnly: false, includeValues: false, pendingLimit: 100_000, startToken: .zero)
        }
        for token in Int64(1)...20 {
            // A chunk: 50 new bugs, the project whose `bugs` grew, and a bug edited meanwhile.
            var chunk = save(token, updated: [1], inserted: Array((token * 100)..<(token * 100 + 50)))
            chunk.updated.append(ObjectChange(objectID: id(1, "Project"), version: token, changedKeys: ["bugs"]))
            let encodings = SharedEncodings()
            for subscription in subscribers {
                subscription.offer(chunk, withoutValues: { chunk.withoutValues }, encodings: encodings)
            }
        }
        var encodedOnce: [EncodedChangeLists] = []
        for subscription in subscribers {
            guard case .disjoint(let merged)? = await subscription.next() else {
                Issue.record("no disjoint save")
                return
            }
            #expect(merged.token.rawValue == 20)
            #expect(merged.saves.map(\.save.token.rawValue) == Array(1...20))
            #expect(merged.updated.map(\.objectID) == [id(1), id(1, "Project")])
            #expect(merged.updated.map(\.version) == [20, 20])
            // The first subscriber encodes each save's lists; the second gets the same ones.
            var encodings = 0
            let lists = merged.saves.map { queued in
                queued.encoding!.lists {
                    encodings += 1
                    return EncodedChangeLists(
                        WireSave(
                            token: queued.save.token.rawValue,
                            inserted: queued.save.inserted.map {
                                WireObjectChange(id: $0.objectID.uriString, version: $0.version)
                            }, updated: [], deleted: []))
                }
            }
            #expect(encodings == (encodedOnce.isEmpty ? 20 : 0))
            if encodedOnce.isEmpty {
                encodedOnce = lists
            } else {
                #expect(lists.map(\.inserted) == encodedOnce.map(\.inserted))
            }
        }
    }

    /// Inserts past the updated keys do not.
    @Test("inserting an object updated earlier switches coalescing to merge by object")
    func insertAfterUpdate() {
        var apart = CoalescedSaves(storeIdentifier: "S")
        apart.add(save(1, updated: [5, 9]))
        apart.add(save(2, inserted: [10, 11]))
        apart.add(save(3, updated: [7], inserted: [12]))
        #expect(apart.disjoint != nil)
        var overlapping = apart
        overlapping.add(save(4, inserted: [9]))
        #expect(overlapping.disjoint == nil)
        #expect(
            overlapping.result().inserted.map(\.objectID).sorted { $0.key < $1.key } == [id(9), id(10), id(11), id(12)])
    }

    /// Checked on random saves that insert, update, delete and insert again.
    @Test("coalescing by concatenation matches merging object by object")
    func disjointMatchesMerging() {
        struct Merged: Equatable {
            var inserted: [ObjectID: Int64] = [:]
            var updated: [ObjectID: [String]] = [:]
            var versions: [ObjectID: Int64] = [:]
            var deleted: [ObjectID: Int64] = [:]
        }
        func reference(_ saves: [DidSave]) -> Merged {
            var merged = Merged()
            for save in saves {
                for change in save.inserted {
                    merged.deleted[change.objectID] = nil
                    merged.inserted[change.objectID] = change.version
                }
                for change in save.updated {
                    if merged.inserted[change.objectID] != nil {
                        merged.inserted[change.objectID] = change.version
                    } else {
                        merged.updated[change.objectID] = Array(
                            Set((merged.updated[change.objectID] ?? []) + change.changedKeys)
                        ).sorted()
                        merged.versions[change.objectID] = change.version
                    }
                }
                for change in save.deleted {
                    if merged.inserted.removeValue(forKey: change.objectID) == nil {
                        merged.deleted[change.objectID] = change.version
                    }
                    merged.updated[change.objectID] = nil
                    merged.versions[change.objectID] = nil
                }
            }
            return merged
        }
        var generator = SystemRandomNumberGenerator()
        var concatenated = 0
        for round in 0..<300 {
            var next: Int64 = 1_000
            var alive: [Int64] = Array(1...20)
            var saves: [DidSave] = []
            for token in Int64(1)...Int64.random(in: 2...12, using: &generator) {
                var save = DidSave(token: HistoryToken(rawValue: token), storeIdentifier: "S")
                let inserts = Int64.random(in: 0...5, using: &generator)
                for key in next..<(next + inserts) {
                    save.inserted.append(ObjectChange(objectID: id(key), version: 1, changedKeys: []))
                }
                alive += Array(next..<(next + inserts))
                next += inserts
                // Rounds of only updates and fresh inserts stay disjoint; the others mix in
                // deletions, updates of new objects and reused keys.
                let mixed = round % 3 != 0
                for _ in 0..<Int.random(in: 0...3, using: &generator) {
                    let key =
                        mixed ? alive.randomElement(using: &generator)! : Int64.random(in: 1...20, using: &generator)
                    guard !save.inserted.contains(where: { $0.objectID == id(key) }),
                        !save.updated.contains(where: { $0.objectID == id(key) })
                    else { continue }
                    save.updated.append(
                        ObjectChange(
                            objectID: id(key), version: token,
                            changedKeys: [["status", "title", "priority"].randomElement(using: &generator)!]))
                }
                if mixed, Bool.random(using: &generator), let key = alive.randomElement(using: &generator),
                    !save.inserted.contains(where: { $0.objectID == id(key) }),
                    !save.updated.contains(where: { $0.objectID == id(key) })
                {
                    save.deleted.append(ObjectChange(objectID: id(key), version: token, changedKeys: []))
                    alive.removeAll { $0 == key }
                    if Bool.random(using: &generator) { next = key }  // the key is inserted again next
                }
                saves.append(save)
            }
            var coalesced = CoalescedSaves(storeIdentifier: "S")
            for save in saves { coalesced.add(save) }
            if coalesced.disjoint != nil { concatenated += 1 }
            let result = coalesced.result()
            var got = Merged()
            for change in result.inserted { got.inserted[change.objectID] = change.version }
            for change in result.updated {
                got.updated[change.objectID] = change.changedKeys.sorted()
                got.versions[change.objectID] = change.version
            }
            for change in result.deleted { got.deleted[change.objectID] = change.version }
            #expect(got == reference(saves), "round \(round)")
            #expect(
                result.inserted.count + result.updated.count + result.deleted.count == coalesced.objectCount,
                "round \(round)")
            #expect(result.token == saves.last!.token)
        }
        // Both ways were taken.
        #expect(concatenated > 50 && concatenated < 300)
    }

    @Test("a spliced reply is byte for byte the reply of the merged save")
    func splicedReply() throws {
        func change(_ n: Int, keys: [String]? = nil) -> WireObjectChange {
            WireObjectChange(
                id: "x-bugsquasher://S/Bug/p\(n)", version: Int64(n), keys: keys,
                values: n % 2 == 0 ? ["title": .string("a \"quoted\" title")] : nil)
        }
        let first = WireSave(token: 3, inserted: [change(1), change(2)], updated: [], deleted: [change(3)])
        let empty = WireSave(token: 4, inserted: [], updated: [], deleted: [])
        let second = WireSave(token: 5, inserted: [change(4)], updated: [], deleted: [])
        let updated = [change(9, keys: ["status"])]
        let spliced = SubscribeReply.splicedSave(
            token: 5, lists: [first, empty, second].map(EncodedChangeLists.init), updated: updated)
        let merged = WireSave(
            token: 5, inserted: first.inserted + second.inserted, updated: updated, deleted: first.deleted)
        let expected = try VarlinkReply.encode(SubscribeReply(event: "save", token: 5, save: merged), continues: true)
        #expect(Data(spliced) == expected)
    }

    /// Malformed: a run without a key, or with a count out of range.
    @Test("a run of IDs expands to one change per key; malformed runs are refused")
    func idRunExpansion() throws {
        let run = WireObjectChange(id: "x-bugsquasher://S/Bug/p41", version: 2, count: 3)
        #expect(
            try run.expandingRun().map(\.id) == [
                "x-bugsquasher://S/Bug/p41", "x-bugsquasher://S/Bug/p42", "x-bugsquasher://S/Bug/p43",
            ])
        #expect(try run.expandingRun().allSatisfy { $0.version == 2 && $0.count == nil })
        #expect(try WireObjectChange(id: "anything", version: 1).expandingRun().count == 1)
        for bad in [
            WireObjectChange(id: "x-bugsquasher://S/Bug/t41", version: 1, count: 2),
            WireObjectChange(id: "x-bugsquasher://S/Bug/p41", version: 1, count: 0),
            WireObjectChange(id: "x-bugsquasher://S/Bug/p41", version: 1, count: 2_000_000),
            WireObjectChange(id: "p", version: 1, count: 2),
        ] {
            #expect(throws: (any Error).self) { try bad.expandingRun() }
        }
    }

    @Test("past the pending limit a subscriber is told to resync from its last delivered token")
    func resync() async {
        let subscription = Subscription(
            registeredOnly: false, includeValues: false, pendingLimit: 5, startToken: HistoryToken(rawValue: 10))
        subscription.offer(save(11, updated: [1]))
        guard case .save(let delivered, _)? = await subscription.next() else {
            Issue.record("no save")
            return
        }
        #expect(delivered.token.rawValue == 11)
        for token in Int64(12)...20 { subscription.offer(save(token, updated: [token, token + 100])) }
        guard case .resync(let from)? = await subscription.next() else {
            Issue.record("no resync")
            return
        }
        #expect(from.rawValue == 11)
        #expect(await subscription.next() == nil)
    }

    /// Not from where the replay stood when the mailbox overflowed.
    @Test("an overflow during a history replay resyncs from the last save it sent")
    func resyncAfterReplay() async {
        // Subscribed with since = 0 while the store was at token 9: saves 1 to 9 come from the
        // history replay, which the client reads slowly.
        let subscription = Subscription(registeredOnly: false, includeValues: false, pendingLimit: 5, startToken: .zero)
        subscription.replays(through: HistoryToken(rawValue: 9))
        for token in Int64(1)...3 { subscription.markDelivered(HistoryToken(rawValue: token)) }
        // An import commits meanwhile and the mailbox overflows with the replay at token 3 ...
        for token in Int64(10)...20 { subscription.offer(save(token, updated: [token, token + 100])) }
        // ... and the replay goes on sending saves 4 to 9.
        for token in Int64(4)...9 { subscription.markDelivered(HistoryToken(rawValue: token)) }
        guard case .resync(let from)? = await subscription.next() else {
            Issue.record("no resync")
            return
        }
        // Resuming after 9 yields 10 to 20 once each; after 3 it would deliver 4 to 9 twice.
        #expect(from.rawValue == 9)
    }

    /// The same few objects changing often never force a resync.
    @Test("a slow subscriber's pending saves are counted by distinct objects")
    func coalescedCount() async {
        let subscription = Subscription(
            registeredOnly: false, includeValues: false, pendingLimit: 10, startToken: .zero)
        for token in Int64(1)...1_000 { subscription.offer(save(token, updated: [1, 2, 3])) }
        guard case .save(let merged, let live)? = await subscription.next() else {
            Issue.record("no save")
            return
        }
        #expect(!live)
        #expect(merged.token.rawValue == 1_000)
        #expect(merged.updated.map(\.objectID) == [id(1), id(2), id(3)])
        #expect(merged.updated.map(\.version) == [1_000, 1_000, 1_000])
    }

    /// They are not merged on the writer just to count distinct objects.
    @Test("past the pending limit, large queued saves cause a resync on their upper bound")
    func largeSavesPastTheLimit() async {
        // Two saves of the same 20,000 objects: 20,000 distinct, 40,000 counted. Merging them
        // would keep the subscriber under its limit of 30,000, at the cost of holding the writer
        // (an import's chunks would hardly merge at all).
        let subscription = Subscription(
            registeredOnly: false, includeValues: false, pendingLimit: 30_000, startToken: .zero)
        subscription.offer(save(1, updated: [1]))
        guard case .save? = await subscription.next() else {
            Issue.record("no save")
            return
        }
        let objects = Array(Int64(1)...20_000)
        subscription.offer(save(2, updated: objects))
        subscription.offer(save(3, updated: objects))
        guard case .resync(let from)? = await subscription.next() else {
            Issue.record("no resync")
            return
        }
        #expect(from.rawValue == 1)
    }

    /// Up to eight, they come one by one.
    @Test("a subscriber more than eight saves behind gets them merged into one on read")
    func behindByMoreThanEight() async {
        let subscription = Subscription(
            registeredOnly: false, includeValues: false, pendingLimit: 1_000, startToken: .zero)
        for token in Int64(1)...3 { subscription.offer(save(token, updated: [token])) }
        for token in Int64(1)...3 {
            guard case .save(let one, let live)? = await subscription.next() else {
                Issue.record("no save \(token)")
                return
            }
            #expect(live && one.token.rawValue == token && one.updated.map(\.objectID) == [id(token)])
        }
        for token in Int64(4)...20 { subscription.offer(save(token, updated: [token, 1])) }
        guard case .save(let merged, let live)? = await subscription.next() else {
            Issue.record("no merged save")
            return
        }
        #expect(!live)
        #expect(merged.token.rawValue == 20)
        #expect(Set(merged.updated.map(\.objectID)) == Set([id(1)] + (Int64(4)...20).map { id($0) }))
        #expect(merged.updated.first { $0.objectID == id(1) }?.version == 20)
    }

    @Test("a queued save keeps no row values for a subscriber that did not ask for them")
    func queuedWithoutValues() async {
        let subscription = Subscription(
            registeredOnly: false, includeValues: false, pendingLimit: 100, startToken: .zero)
        var withValues = save(1, updated: [1])
        withValues.updated[0].values = RowSnapshot(version: 1, attributes: [.string("Open")], toOne: [])
        subscription.offer(withValues)
        guard case .save(let queued, _)? = await subscription.next() else {
            Issue.record("no save")
            return
        }
        #expect(queued.updated.first?.values == nil)
    }

    /// A refused Register registers nothing; unregistering and closing give places back.
    @Test("registrations are capped per subscription and over all of them")
    func registrationLimits() throws {
        let limits = RegistrationLimits(perSubscription: 3, total: 5)
        let first = Subscription(
            registeredOnly: true, includeValues: false, pendingLimit: 100, registrationLimits: limits, startToken: .zero
        )
        let second = Subscription(
            registeredOnly: true, includeValues: false, pendingLimit: 100, registrationLimits: limits, startToken: .zero
        )
        #expect(try first.register([id(1), id(2), id(2)]) == 2)
        #expect(try first.register([id(1), id(2)]) == 2, "registering again takes no place")
        let perSubscription = #expect(throws: RegistrationLimitExceeded.self) { try first.register([id(3), id(4)]) }
        #expect(perSubscription?.scope == "subscription" && perSubscription?.limit == 3)
        #expect(first.registeredCount == 2 && limits.current == 2)
        #expect(try second.register([id(5), id(6), id(7)]) == 3)
        let total = #expect(throws: RegistrationLimitExceeded.self) { try first.register([id(3)]) }
        #expect(total?.scope == "daemon" && total?.limit == 5 && total?.registered == 5)
        #expect(second.unregister([id(5), id(8)]) == 2)
        #expect(try first.register([id(3)]) == 3)
        #expect(limits.current == 5)
        second.close()
        #expect(limits.current == 3)
        first.close()
        #expect(limits.current == 0)
        #expect(try first.register([id(9)]) == 3, "a closed subscription counts nothing more")
        #expect(limits.current == 0)
    }

    @Test("a waiting subscriber is woken by the next save; closing ends it")
    func wakeAndClose() async {
        let subscription = Subscription(
            registeredOnly: false, includeValues: false, pendingLimit: 100, startToken: .zero)
        async let next = subscription.next()
        try? await Task.sleep(for: .milliseconds(20))
        subscription.offer(save(1, updated: [1]))
        guard case .save(let save, let live)? = await next else {
            Issue.record("no save")
            return
        }
        #expect(save.token.rawValue == 1)
        #expect(live)
        subscription.close()
        #expect(await subscription.next() == nil)
    }

    /// Even when the saves queued meanwhile are merged.
    @Test("a save the history replay delivered is never delivered again from the mailbox")
    func replayedSaveNotMergedAgain() async throws {
        // Subscribed with since = 10; save 11 was committed before the token was read (start =
        // 11), so the replay delivers it, and the mailbox must not.
        let subscription = Subscription(
            registeredOnly: false, includeValues: false, pendingLimit: 100_000, startToken: HistoryToken(rawValue: 10))
        subscription.offer(save(11, inserted: [11]))
        subscription.replays(through: HistoryToken(rawValue: 11))
        subscription.offer(save(11, inserted: [11]))  // published after the token was read
        // While a long replay runs, more live saves queue up than the mailbox keeps unmerged (1,024).
        for token in Int64(12)...1_100 { subscription.offer(save(token, inserted: [token])) }
        subscription.markDelivered(HistoryToken(rawValue: 11))  // the replay sent 11
        var inserted: [ObjectID] = []
        var last: Int64 = 0
        while last < 1_100, let event = await subscription.next() {
            switch event {
            case .save(let save, _):
                inserted += save.inserted.map(\.objectID)
                last = save.token.rawValue
            case .disjoint(let merged):
                inserted += merged.saves.flatMap { $0.save.inserted.map(\.objectID) }
                last = merged.token.rawValue
            default:
                Issue.record("unexpected \(event)")
                last = 1_100
            }
        }
        #expect(
            Set(inserted) == Set((12...1_100).map { id($0) }) && inserted.count == 1_089,
            "\(inserted.count) inserted, \(inserted.filter { $0 == id(11) }.count) of them save 11's")
    }

    /// A password belongs in password_file= (a systemd credential), not in a file others read.
    @Test("a store URL with a password is refused in a world-readable configuration file")
    func storePasswordInConfiguration() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("squasherd-\(UUID().uuidString).conf")
            .path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try "store = postgresql://squasherd:secret@db/bugs\n".write(toFile: path, atomically: true, encoding: .utf8)
        func resolve() throws -> DaemonConfiguration {
            try DaemonConfiguration.resolve(
                stateDirectory: nil, runtimeDirectory: nil, configFile: path, environment: [:])
        }
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: path)
        let refused = #expect(throws: DaemonError.self) { try resolve() }
        #expect(
            refused?.statement.contains("every user of this machine may read \(path)") == true,
            "\(String(describing: refused))")
        #expect(refused?.advice.contains("password_file=") == true)
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: path)
        #expect(try resolve().postgres?.password == "secret")
        try "store = postgresql://squasherd@db/bugs?password_file=/run/credentials/squasherd.service/pg\n".write(
            toFile: path, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: path)
        #expect(try resolve().postgres?.passwordFile == "/run/credentials/squasherd.service/pg")
    }

    @Test("the configuration file is parsed strictly and loses to flags and systemd's variables")
    func configuration() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("squasherd-\(UUID().uuidString).conf")
            .path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try
            "state_directory = /srv/state\n# comment\nchunk_size = 250\nimport_nice = 5\nimport_yield_ms = 35\nwrite_socket_mode = 0640\nstore_wait = 300\n"
            .write(toFile: path, atomically: true, encoding: .utf8)
        let fromFile = try DaemonConfiguration.resolve(
            stateDirectory: nil, runtimeDirectory: nil, configFile: path, environment: [:])
        #expect(fromFile.stateDirectory == "/srv/state")
        #expect(fromFile.runtimeDirectory == "run/sockets")
        #expect(fromFile.chunkSize == 250)
        #expect(fromFile.importPriority == 5)
        #expect(fromFile.importYield == .milliseconds(35))
        #expect(fromFile.writeSocketMode == 0o640)
        #expect(fromFile.storeWait == .seconds(300))
        let systemd = try DaemonConfiguration.resolve(
            stateDirectory: nil, runtimeDirectory: nil, configFile: path,
            environment: ["STATE_DIRECTORY": "/var/lib/squasherd", "RUNTIME_DIRECTORY": "/run/squasherd"])
        #expect(systemd.stateDirectory == "/var/lib/squasherd")
        #expect(systemd.runtimeDirectory == "/run/squasherd")
        let flag = try DaemonConfiguration.resolve(
            stateDirectory: "/tmp/x", runtimeDirectory: nil, configFile: path,
            environment: ["STATE_DIRECTORY": "/var/lib/squasherd"])
        #expect(flag.stateDirectory == "/tmp/x")
        try "chunk_size = lots\n".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(throws: DaemonError.self) {
            try DaemonConfiguration.resolve(
                stateDirectory: nil, runtimeDirectory: nil, configFile: path, environment: [:])
        }
        // Values that would not work are refused, not clamped: a message limit of 0 closed every
        // connection without a word.
        for line in [
            "import_nice = 20", "import_yield_ms = 1001", "chunk_size = 0", "chunk_size = 5000000",
            "max_message_bytes = 0", "max_record_bytes = 10", "subscriber_pending_limit = 0", "upload_idle_timeout = 0",
            "store_wait = -1", "store_wait = 86401",
        ] {
            try (line + "\n").write(toFile: path, atomically: true, encoding: .utf8)
            #expect(throws: DaemonError.self, "\(line)") {
                try DaemonConfiguration.resolve(
                    stateDirectory: nil, runtimeDirectory: nil, configFile: path, environment: [:])
            }
        }
        // CRLF line ends: each line is read (the whole file used to be one comment line).
        try "# written on Windows\r\nchunk_size = 300\r\nlog_level = critical\r\n".write(
            toFile: path, atomically: true, encoding: .utf8)
        let crlf = try DaemonConfiguration.resolve(
            stateDirectory: nil, runtimeDirectory: nil, configFile: path, environment: [:])
        #expect(crlf.chunkSize == 300)
        try "# written on Windows\r\nchunk_size = 0\r\n".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(throws: DaemonError.self) {
            try DaemonConfiguration.resolve(
                stateDirectory: nil, runtimeDirectory: nil, configFile: path, environment: [:])
        }
        // A key set twice is a mistake to point at, not a silent "last one wins".
        try "chunk_size = 300\n\nchunk_size = 400\n".write(toFile: path, atomically: true, encoding: .utf8)
        let twice = #expect(throws: DaemonError.self) {
            try DaemonConfiguration.resolve(
                stateDirectory: nil, runtimeDirectory: nil, configFile: path, environment: [:])
        }
        #expect(
            twice?.message.contains(":3: 'chunk_size' is set twice (first on line 1)") == true,
            "\(String(describing: twice))")
        // A control character (a NUL a program wrote) is named, not shown as nothing.
        try "chunk_size = 5\u{0}\n".write(toFile: path, atomically: true, encoding: .utf8)
        let control = #expect(throws: DaemonError.self) {
            try DaemonConfiguration.resolve(
                stateDirectory: nil, runtimeDirectory: nil, configFile: path, environment: [:])
        }
        #expect(
            control?.message.contains(":1: the line has a control character (U+0000)") == true,
            "\(String(describing: control))")
        // A log level the daemon does not know is refused with the file it is in; so is a mode
        // that is not octal.
        try "# quiet\nlog_level = loud\n".write(toFile: path, atomically: true, encoding: .utf8)
        let level = #expect(throws: DaemonError.self) {
            try DaemonConfiguration.resolve(
                stateDirectory: nil, runtimeDirectory: nil, configFile: path, environment: [:])
        }
        #expect(
            level?.message
                == "\(path):2: 'log_level = loud' is not a log level. Use trace, debug, info, notice, warning, error or critical.",
            "\(String(describing: level))")
        // A value out of range or not a number names its line too.
        try "chunk_size = 300\nimport_nice = 20\n".write(toFile: path, atomically: true, encoding: .utf8)
        let range = #expect(throws: DaemonError.self) {
            try DaemonConfiguration.resolve(
                stateDirectory: nil, runtimeDirectory: nil, configFile: path, environment: [:])
        }
        #expect(
            range?.message.hasPrefix("\(path):2: 'import_nice = 20' is out of range") == true,
            "\(String(describing: range))")
        // Each kind of bad number is told apart: too large for any integer is out of range too,
        // a fraction is not a whole number, and a key without a range says how large it may be.
        for (line, said) in [
            (
                "import_yield_ms = 99999999999999999999",
                "'import_yield_ms = 99999999999999999999' is out of range. Use 0 to 1000"
            ),
            ("import_yield_ms = -5", "'import_yield_ms = -5' is out of range. Use 0 to 1000"),
            ("import_yield_ms = 20.5", "'import_yield_ms = 20.5' is not a whole number"),
            ("import_yield_ms = 2e1", "'import_yield_ms = 2e1' is not a whole number"),
            ("max_connections = 99999999999999999999", "'max_connections = 99999999999999999999' is too large"),
            ("max_connections = -1", "'max_connections = -1' is not a non-negative number"),
            ("import_yield_ms = soon", "'import_yield_ms = soon' is not a non-negative number"),
        ] {
            try (line + "\n").write(toFile: path, atomically: true, encoding: .utf8)
            let refused = #expect(throws: DaemonError.self, "\(line)") {
                try DaemonConfiguration.resolve(
                    stateDirectory: nil, runtimeDirectory: nil, configFile: path, environment: [:])
            }
            #expect(refused?.message.contains(said) == true, "\(String(describing: refused))")
        }
        try "read_socket_mode = 0999\n".write(toFile: path, atomically: true, encoding: .utf8)
        let mode = #expect(throws: DaemonError.self) {
            try DaemonConfiguration.resolve(
                stateDirectory: nil, runtimeDirectory: nil, configFile: path, environment: [:])
        }
        #expect(mode?.message.contains("is not an octal mode like 0660") == true, "\(String(describing: mode))")
        // Permission bits only: 7777 would make the socket setuid, setgid and sticky.
        try "write_socket_mode = 0660\nread_socket_mode = 7777\n".write(toFile: path, atomically: true, encoding: .utf8)
        let special = #expect(throws: DaemonError.self) {
            try DaemonConfiguration.resolve(
                stateDirectory: nil, runtimeDirectory: nil, configFile: path, environment: [:])
        }
        #expect(
            special?.message.hasPrefix("\(path):2: 'read_socket_mode = 7777' is not a socket's permissions") == true,
            "\(String(describing: special))")
        try "colour = blue\n".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(throws: DaemonError.self) {
            try DaemonConfiguration.resolve(
                stateDirectory: nil, runtimeDirectory: nil, configFile: path, environment: [:])
        }
        // A directory or a file that is not UTF-8 is named in the error, not left to Foundation.
        let directory = FileManager.default.temporaryDirectory.path
        let refusal = #expect(throws: DaemonError.self) {
            try DaemonConfiguration.resolve(
                stateDirectory: nil, runtimeDirectory: nil, configFile: directory, environment: [:])
        }
        #expect(refusal?.message.contains("is a directory") == true)
        try Data([0x63, 0xFF, 0xFE, 0x0A]).write(to: URL(fileURLWithPath: path))
        let unreadable = #expect(throws: DaemonError.self) {
            try DaemonConfiguration.resolve(
                stateDirectory: nil, runtimeDirectory: nil, configFile: path, environment: [:])
        }
        #expect(
            unreadable?.message.contains("The configuration file \(path) is not UTF-8 text") == true,
            "\(String(describing: unreadable))")
        // /dev/null, the usual "no configuration", is an empty one.
        let empty = try DaemonConfiguration.resolve(
            stateDirectory: nil, runtimeDirectory: nil, configFile: "/dev/null", environment: [:])
        #expect(empty.stateDirectory == "run/state")
    }
}

extension Subscription.Event: Equatable {
    static func == (lhs: Self, rhs: Self) -> Bool { "\(lhs)" == "\(rhs)" }
}
