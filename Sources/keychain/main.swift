import KeychainCLI

KeychainCommand.mainAcceptingLeadingSocket()
