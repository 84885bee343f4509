package proxy

// SetCommandHook installs f to run in the command pump before each client
// command is forwarded. Tests use it to inject faults (a panic) into one
// connection. Call it before Serve.
func SetCommandHook(s *Server, f func(cmd byte)) { s.commandHook = f }

// SetGuardWindow sets the executor's GuardWindow hook (see executor.Env).
func SetGuardWindow(s *Server, f func()) { s.env.GuardWindow = f }

// SetMaxGuardKeys sets the executor's MaxGuardKeys (see executor.Env).
func SetMaxGuardKeys(s *Server, n int) { s.env.MaxGuardKeys = n }
