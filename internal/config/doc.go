// Package config loads Busbar's configuration: the Service Bus emulator's
// Config.json, read verbatim, and the server's own settings.
//
// # Emulator Config.json
//
// LoadEmulatorConfig reads the file the Azure Service Bus emulator mounts at
// /ServiceBus_Emulator/ConfigFiles/Config.json, with the same shape:
//
//	UserConfig
//	  Namespaces[]  Name, Queues[], Topics[], Hosts[], Policies
//	    Queues[]    Name, Properties{…}
//	    Topics[]    Name, Properties{…}, Subscriptions[]
//	      Subscriptions[]  Name, Properties{…}, Rules[]
//	        Rules[]        Name, Properties{FilterType, CorrelationFilter | SqlFilter, Action}
//	  Logging       Type
//
// The text is JSON with comments, as in the emulator's own sample: `//` line
// comments, `/* */` block comments and trailing commas are accepted outside
// strings; "//" inside a string (a URL, say) is left alone. A UTF-8 byte
// order mark is skipped.
//
// Keys are matched exactly as the emulator's schema spells them and, failing
// that, case-insensitively ("lockDuration" is LockDuration). The same key
// given twice in one object (in any case) is an error. The values of
// FilterType and Status are matched case-insensitively too and stored in
// their canonical spelling; names of correlation filter Properties are data
// and are kept exactly. null counts as absent.
//
// Unknown keys are warnings, not errors, by default: configurations in the
// wild carry keys the emulator silently ignores (a namespace "Properties"
// object, misplaced properties), and a file the emulator accepts must load.
// Each warning names the JSON path and, when a known key is close, suggests
// it ("did you mean LockDuration?"). They are returned in
// EmulatorConfig.Warnings for the caller to log. Options.Strict turns them
// into errors. When a load fails, its warnings follow the errors in the
// ErrorList: an unknown "Nmae" explains a missing "Name".
//
// # What differs from the emulator
//
// Busbar is Azure Service Bus, not the emulator, so:
//
//   - Values are validated against the full Service Bus ranges, not the
//     emulator's quotas: LockDuration 5 s … 5 min, DefaultMessageTimeToLive
//     ≥ 1 s (no 1 h cap), DuplicateDetectionHistoryTimeWindow 20 s … 7 days,
//     MaxDeliveryCount ≥ 1 (no cap of 10), AutoDeleteOnIdle ≥ 5 min,
//     MaxSizeInMegabytes ≥ 1, MaxMessageSizeInKilobytes 1 … 102400, no limit
//     on the number of queues, topics, subscriptions or rules, and any
//     valid namespace name (not only "sbemulatorns").
//   - The other Service Bus entity properties (MaxSizeInMegabytes,
//     AutoDeleteOnIdle, Status, UserMetadata, EnableBatchedOperations,
//     MaxMessageSizeInKilobytes, DeadLetteringOnFilterEvaluationExceptions,
//     EnablePartitioning, SupportOrdering) are accepted too.
//   - A property left out stays unset (a nil pointer): the caller applies the
//     Service Bus defaults, NOT the emulator's. Notably MaxDeliveryCount
//     defaults to 10 (emulator: 3), DefaultMessageTimeToLive to "never",
//     P10675199DT2H48M5.4775807S (emulator: PT1H), and
//     DuplicateDetectionHistoryTimeWindow to PT10M (emulator: PT20S). This
//     package does not fill defaults in.
//   - An empty ForwardTo / ForwardDeadLetteredMessagesTo ("" — the emulator
//     sample writes that) means "not set". Besides bare entity names, the
//     absolute URIs Service Bus stores (sb://host/name, https://host/name)
//     are accepted; ForwardEntityName extracts the name.
//   - Queues, Topics, a topic's Subscriptions and Logging may be left out.
//   - Queue, topic, subscription and rule names follow Busbar's one naming
//     rule (package names), which is stricter than the emulator's pattern
//     where that lets through names that are not Service Bus's ("a/../b")
//     and accepts "$Default" as a rule name so that an export of a live
//     namespace loads back. Options.ExistingNames relaxes it to the names
//     entities from before the rule may have, for checking an export.
//   - "Subject" is accepted as a synonym of "Label" in a CorrelationFilter.
//   - A namespace may have Hosts (host names selecting it, each in one
//     namespace only) and Policies (its shared access policies in the
//     --policies form); the emulator has neither.
//   - An unknown Logging.Type is a warning (Busbar logs by its own settings).
//
// All problems are collected: the error returned is an ErrorList of
// *FieldError, each naming the JSON path and the rule broken, e.g.
//
//	config: UserConfig.Namespaces[0].Queues[2].Properties.LockDuration: "PT10M" is out of range (5 s … 5 min)
//
// Paths use the schema's spelling of each key, whatever case the file used.
//
// ForwardTo and ForwardDeadLetteredMessagesTo must name a queue or topic
// declared in the same namespace of the file, or one Options.EntityExists
// reports (entities already in the data directory, for example).
// EmulatorConfig.ForwardTargets lists every forward reference for callers that
// want to check them themselves.
//
// # Durations
//
// ParseISO8601 and FormatISO8601 (duration.go) convert Service Bus' ISO 8601
// durations; the admin API uses them too. In the date part a year counts 365
// days and a month 30 days, as .NET's XmlConvert does. Values beyond
// time.Duration's range saturate at MaxDuration, which formats as
// P10675199DT2H48M5.4775807S, the Service Bus spelling of "never".
//
// # Server settings
//
// Server holds busbar serve's own settings. Each is declared once, in the
// table ServerSettings returns: flag name, BUSBAR_* environment variable,
// default, usage, and the parser that turns its text into its Server
// field. The command layer declares its flags from that table and applies
// the ones the user set with Server.Set, after FromEnv: flags override the
// environment, which overrides the defaults (DefaultServer, the table's
// defaults parsed). Validate then checks the whole. package server embeds
// Server in its Options and reads each setting where it is used, so a new
// setting is a Server field, a table entry and its use.
package config
