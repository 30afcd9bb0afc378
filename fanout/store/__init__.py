"""The timeline store: the one owner of the Redis layout (keys, encodings, Lua
scripts, connections, generations, reads and writes)."""
