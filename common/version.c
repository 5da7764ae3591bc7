#include "specd/version.h"

const char *specd_version(void) { return SPECD_VERSION_STRING; }
