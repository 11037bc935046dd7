// The keychain CLI linked dynamically, for tests only: the shipped `keychain` is a static
// executable, into which no LD_PRELOAD hook (Tests/Hooks/freescan.c) can be loaded.
import KeychainCLI

KeychainCommand.main()
