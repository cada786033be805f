import BugSquasherRuntime
import BugSquasherTransport

// Before anything opens a file: a closed standard stream gets a stand-in, so that no socket or
// file of the command takes its number (and is read as its input, or written as its output).
StandardStreams.reopenClosed()

// A subscriber or a watcher mostly waits for its feed: one thread serves both its socket and its
// Swift tasks, so that a notification is handled without hand-offs between threads. Installed
// here, on the main thread, before any task runs.
if let command = CommandLine.arguments.dropFirst().first, ["subscribe", "watch"].contains(command) {
    SingleThreadedRuntime.install()
}
await Squasherctl.start()
