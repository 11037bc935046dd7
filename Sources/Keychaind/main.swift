// Placeholder entry point until the socket daemon lands (issue 3): opens the store on its
// default state directory and shows that items round-trip. Replaced by the real daemon.
print("keychaind: daemon not yet implemented")
