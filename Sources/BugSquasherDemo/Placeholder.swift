@main struct M { static func main() {} }
