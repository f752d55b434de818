#include "meshtrain/core/error.h"
// Header-only today; this unit keeps the library layout uniform and is where
// error formatting grows if it needs to.
