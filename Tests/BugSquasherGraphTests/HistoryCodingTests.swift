import BugSquasherGraph
import Foundation
import Testing

@Suite("History payloads")
struct HistoryCodingTests {
    private static let store = "6F1C0D2E-0000-4000-8000-000000000001"

    private static let model: ManagedObjectModel = {
        let sample = EntityDescription(
            name: "Sample",
            attributes: [
                .attribute("text", .string, optional: true), .attribute("number", .int64, optional: true),
                .attribute("real", .double, optional: true), .attribute("flag", .bool, optional: true),
                .attribute("when", .date, optional: true), .attribute("bytes", .data, optional: true),
            ],
            relationships: [.toOne("owner", "Owner", inverse: "samples")])
        let owner = EntityDescription(
            name: "Owner", attributes: [], relationships: [.toMany("samples", "Sample", inverse: "owner")])
        return try! ManagedObjectModel(entities: [sample, owner])
    }()

    private static func change(_ key: Int64, _ attributes: [Value], owner: Int64?) -> ObjectChange {
        let row = RowSnapshot(
            version: 3, attributes: attributes,
            toOne: [owner.map { ObjectID(store: store, entity: "Owner", primaryKey: $0) }])
        return ObjectChange(
            objectID: ObjectID(store: store, entity: "Sample", primaryKey: key), version: 3,
            changedKeys: ["text", "real"], values: row)
    }

    @Test("updated rows written with values read back exactly, with the model; without it, none")
    func valuesRoundTrip() throws {
        let rows: [[Value]] = [
            [
                .string("tab\t\"quoted\" \\ 🐞 \u{0}"), .int64(.max), .double(-0.0), .bool(true),
                .date(Date(timeIntervalSince1970: 1_500_000_000.123456)), .data(Data(0...255)),
            ],
            [.null, .int64(.min), .double(.infinity), .bool(false), .null, .data(Data())],
            [.string(""), .int64(-1), .double(0.1), .null, .date(Date(timeIntervalSince1970: -1.5)), .null],
            [.null, .null, .double(-.infinity), .null, .null, .null],
        ]
        var didSave = DidSave(token: HistoryToken(rawValue: 9), storeIdentifier: Self.store)
        didSave.updated = rows.enumerated().map {
            Self.change(Int64($0.offset + 1), $0.element, owner: $0.offset == 1 ? nil : 7)
        }
        let payload = HistoryCoding.encode(didSave, withValues: true)

        let read = try HistoryCoding.decode(payload, store: Self.store, token: didSave.token, model: Self.model)
        #expect(read.updated.map(\.objectID) == didSave.updated.map(\.objectID))
        #expect(read.updated.map(\.changedKeys) == didSave.updated.map(\.changedKeys))
        for (back, written) in zip(read.updated, didSave.updated) {
            let values = try #require(back.values, "\(back.objectID)")
            #expect(values == written.values, "\(back.objectID)")
            if case .double(let real) = written.values?.attributes[2], case .double(let again) = values.attributes[2] {
                #expect(real.sign == again.sign)
            }
        }
        // Without the model, or for a model whose entity has other attributes: no values (the
        // reader reads the rows from the table).
        let plain = try HistoryCoding.decode(payload, store: Self.store, token: didSave.token)
        #expect(plain.updated.allSatisfy { $0.values == nil })
        let other = try ManagedObjectModel(entities: [
            EntityDescription(name: "Sample", attributes: [.attribute("text", .string, optional: true)])
        ])
        let mismatched = try HistoryCoding.decode(payload, store: Self.store, token: didSave.token, model: other)
        #expect(mismatched.updated.allSatisfy { $0.values == nil })
        #expect(mismatched.updated.map(\.changedKeys) == didSave.updated.map(\.changedKeys))

        // Without values, the payload is the plain one.
        let bare = HistoryCoding.encode(didSave)
        #expect(bare.count < payload.count)
        let unvalued = try HistoryCoding.decode(bare, store: Self.store, token: didSave.token, model: Self.model)
        #expect(unvalued.updated.allSatisfy { $0.values == nil })
    }

    /// Pairs of every entity, in entity-name order; keys the reader does not know are skipped;
    /// text that is not a payload is a damaged history, said so.
    @Test("inserted and deleted pairs read back by entity; a damaged payload is refused")
    func pairsAndDamage() throws {
        let payload = Data(
            #"{"i":{"Sample":[4,1,5,1],"Owner":[2,1]},"u":{"Sample":[[7,3,"text"]]},"d":{"Owner":[9,2]},"x":[1,{"y":null}]}"#
                .utf8)
        let read = try HistoryCoding.decode(payload, store: Self.store, token: HistoryToken(rawValue: 4))
        #expect(read.inserted.map(\.objectID.entityName) == ["Owner", "Sample", "Sample"])
        #expect(read.inserted.map(\.objectID.key) == [2, 4, 5])
        #expect(read.updated.map(\.version) == [3] && read.updated.first?.changedKeys == ["text"])
        #expect(read.deleted.map(\.objectID) == [ObjectID(store: Self.store, entity: "Owner", primaryKey: 9)])
        #expect(read.token.rawValue == 4 && read.storeIdentifier == Self.store)
        for damaged in [#"[1,2]"#, #"{"i":{"Sample":["a"]}}"#, #"{"u":"#, #"{"i":{}} trailing"#] {
            let error = #expect(throws: GraphError.self) {
                try HistoryCoding.decode(Data(damaged.utf8), store: Self.store, token: HistoryToken(rawValue: 1))
            }
            #expect(error?.code == .invalidStore, "\(damaged)")
        }
    }

    /// A reader tells a payload without inserts from its first bytes; anything else may have some.
    @Test("a payload without inserts says so in its first bytes")
    func insertsAtAGlance() {
        var edit = DidSave(token: HistoryToken(rawValue: 1), storeIdentifier: Self.store)
        edit.updated = [Self.change(7, [.string("t"), .null, .null, .null, .null, .null], owner: nil)]
        #expect(!HistoryCoding.mayHaveInserts(HistoryCoding.encode(edit, withValues: true)))
        edit.deleted = [
            ObjectChange(
                objectID: ObjectID(store: Self.store, entity: "Owner", primaryKey: 9), version: 2, changedKeys: [])
        ]
        #expect(!HistoryCoding.mayHaveInserts(HistoryCoding.encode(edit)))
        var chunk = edit
        chunk.inserted = [
            ObjectChange(
                objectID: ObjectID(store: Self.store, entity: "Sample", primaryKey: 8), version: 1, changedKeys: [])
        ]
        #expect(HistoryCoding.mayHaveInserts(HistoryCoding.encode(chunk)))
        for other in ["", "{", #"{"u":{},"i":{}}"#, #"{"i":{"Sample":[4,1]}}"#] {
            #expect(HistoryCoding.mayHaveInserts(Data(other.utf8)), "\(other)")
        }
    }
}
