import BugSquasherGraph
import Foundation
import Testing

@Suite("Object IDs")
struct ObjectIDTests {
    @Test("permanent and temporary URIs round-trip; malformed ones are rejected")
    func uris() throws {
        let id = ObjectID(store: "6F1C0D2E-0000-4000-8000-000000000001", entity: "Bug", primaryKey: 42)
        #expect(id.uriString == "x-bugsquasher://6F1C0D2E-0000-4000-8000-000000000001/Bug/p42")
        #expect(ObjectID(uri: id.uriString) == id)
        let temporary = ObjectID.temporary(entity: "Comment")
        #expect(temporary.isTemporary)
        #expect(temporary.primaryKey == nil)
        #expect(ObjectID(uri: temporary.uriString) == temporary)
        #expect(ObjectID.temporary(entity: "Comment") != temporary)
        for bad in [
            "", "http://x/Bug/p1", "x-bugsquasher://S/Bug/q1", "x-bugsquasher://S/Bug/p", "x-bugsquasher://S/p1",
            "x-bugsquasher://temporary/Bug/p1", "x-bugsquasher://S/Bug/t1",
            "x-bugsquasher://S/Bug/p0", "x-bugsquasher://S/Bug/p-1", "x-bugsquasher://S/Bug/p01",
            "x-bugsquasher://S/Bug/p+1", "x-bugsquasher://S/Bug/p1 ",
            "x-bugsquasher://S/Bug/p1/2", "x-bugsquasher:///Bug/p1", "x-bugsquasher://S//p1",
            "x-bugsquasher://S/Bug/p9223372036854775808", "x-bugsquasher://S/Bug/p١",
        ] {
            #expect(ObjectID(uri: bad) == nil, "\(bad)")
            #expect(ObjectID(uri: bad, reusingStore: "S") == nil, "\(bad)")
        }
        let largest = ObjectID(store: "S", entity: "Bug", primaryKey: .max)
        #expect(ObjectID(uri: largest.uriString) == largest)
        // Given the store's string to share, the same URIs parse to the same IDs.
        for known in [id, temporary, largest] {
            #expect(ObjectID(uri: known.uriString, reusingStore: id.storeIdentifier) == known)
            #expect(ObjectID(uri: known.uriString, reusingStore: "S") == known)
        }
        let json = try JSONEncoder().encode([id])
        #expect(String(decoding: json, as: UTF8.self).contains("p42"))
        #expect(try JSONDecoder().decode([ObjectID].self, from: json) == [id])
    }
}

@Suite("Model")
struct ModelTests {
    @Test("a relationship without a matching inverse is refused")
    func inverseRequired() {
        #expect(throws: GraphError.self) {
            try ManagedObjectModel(entities: [
                EntityDescription(name: "A", attributes: [], relationships: [.toOne("b", "B", inverse: "as")]),
                EntityDescription(name: "B", attributes: [], relationships: [.toMany("others", "A", inverse: "b")]),
            ])
        }
        #expect(throws: GraphError.self) {
            try ManagedObjectModel(entities: [EntityDescription(name: "A", uniqueKey: "missing", attributes: [])])
        }
    }

    @Test("the version hash is stable and changes with the shape")
    func versionHash() throws {
        let a = try ManagedObjectModel(entities: [EntityDescription(name: "A", attributes: [.attribute("x", .string)])])
        let b = try ManagedObjectModel(entities: [EntityDescription(name: "A", attributes: [.attribute("x", .string)])])
        let c = try ManagedObjectModel(entities: [EntityDescription(name: "A", attributes: [.attribute("x", .int64)])])
        #expect(a.versionHash == b.versionHash)
        #expect(a.versionHash != c.versionHash)
        #expect(a.versionHash.count == 16)
    }
}
