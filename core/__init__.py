"""The vocabulary every floor shares: errors, units, time dilation (Scale), ECN thresholds, frame geometry. Pure."""
