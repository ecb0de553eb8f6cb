package sim

import "time"

// Epoch is the simulated time every run starts at. The simulated clock
// shared by the engine and the bank is a settletest.ManualClock standing
// there: it only moves when the simulation advances it.
var Epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
