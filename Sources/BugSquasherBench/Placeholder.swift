@main struct M2 { static func main() {} }
