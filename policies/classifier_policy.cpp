#include "policies/classifier_policy.hpp"
// The interface is header-only today; this unit anchors the vtable.
