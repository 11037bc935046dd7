#if canImport(Glibc)
import Glibc
#endif
import GitCredential

exit(CredentialHelper.main(arguments: Array(CommandLine.arguments.dropFirst())))
