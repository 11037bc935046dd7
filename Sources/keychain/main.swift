import KeychainCLI

KeychainCommand.main()
