// Package filter is the Service Bus rule language: SQL filters, SQL rule
// actions and correlation filters, as subscription rules use them.
//
// A filter or action is compiled once, when the rule is created
// (CompileSQL, CompileAction), and evaluated for every message published
// to the topic (Filter.Match, Action.Apply, CorrelationFilter.Match). The
// text is never re-parsed per message, and matching a property against a
// constant does not allocate.
//
// # Layout
//
// The package is written the way the standard library writes parsers:
//
//	token.go        Token, the keyword table, Precedence
//	scanner.go      Scanner: text -> (pos, tok, lit)
//	ast.go          the syntax tree; every node prints canonical text
//	parser.go       precedence climbing, nesting limit, length limit
//	errors.go       positioned ErrorList; EvalError for evaluation failures
//	filter.go       CompileSQL, Filter, parameter binding
//	value.go        the run-time values and their kinds
//	env.go          Env (message + SystemProps), sys. and user. lookups
//	eval.go         three-valued evaluation, C# typing rules
//	like.go         LIKE patterns
//	action.go       CompileAction, Action.Apply
//	correlation.go  CorrelationFilter
//
// # Grammar
//
// In EBNF; keywords and function names are case-insensitive.
//
//	Filter     = Condition .
//	Action     = Statement { [ ";" ] Statement } [ ";" ] .
//	Statement  = "SET" Property "=" Value | "REMOVE" Property .
//
//	Condition  = AndCond { "OR" AndCond } .
//	AndCond    = NotCond { "AND" NotCond } .
//	NotCond    = "NOT" NotCond | Predicate .
//	Predicate  = Value CmpOp Value
//	           | Value [ "NOT" ] "LIKE" Value [ "ESCAPE" Value ]
//	           | Value [ "NOT" ] "IN" "(" Value { "," Value } ")"
//	           | PropertyRef "IS" [ "NOT" ] "NULL"
//	           | "EXISTS" "(" Property ")"
//	           | "(" Condition ")"
//	           | "TRUE" | "FALSE" .
//	CmpOp      = "=" | "<>" | "!=" | "<" | "<=" | ">" | ">=" .
//
//	Value      = Term { ( "+" | "-" ) Term } .
//	Term       = Unary { ( "*" | "/" | "%" ) Unary } .
//	Unary      = ( "+" | "-" ) Unary | Primary .
//	Primary    = Constant | Function | Property | Parameter | "(" Value ")" .
//	Function   = "newid" "(" ")" | ( "property" | "p" ) "(" Value ")" .
//	PropertyRef = Property | ( "property" | "p" ) "(" Value ")" .
//	Property   = [ ( "sys" | "user" ) "." ] Name .
//	Name       = RegularId | DelimitedId | QuotedId .
//	Parameter  = "@" IdChar { IdChar } .
//	Constant   = Integer | Decimal | Approx | String | "TRUE" | "FALSE" | "NULL" .
//
//	RegularId   = Letter { "_" | Letter | Digit } .   (not a keyword)
//	DelimitedId = "[" { char | "]]" } "]" .
//	QuotedId    = `"` { char | `""` } `"` .
//	String      = "'" { char | "''" } "'" .
//	Integer     = digit { digit } .                    (Int64)
//	Decimal     = digit { digit } "." digit { digit } . (Double)
//	Approx      = digit { digit } [ "." digit { digit } ] ( "e" | "E" ) [ "+" | "-" ] digit { digit } .
//
// Letter and Digit are the Unicode letter and decimal-digit classes. The
// keywords are AND OR NOT LIKE ESCAPE IN IS NULL EXISTS TRUE FALSE, and in
// actions SET and REMOVE.
//
// Operators bind, loosest first: OR; AND; NOT; the comparisons, LIKE, IN
// and IS; + and -; * / and %; unary + and -. Conditions and values share
// one expression grammar: the parser checks that AND, OR and NOT combine
// conditions, that comparisons and arithmetic combine values, and that a
// filter is a condition; a sign directly before a number is part of it.
// Nesting (parentheses, unary operators, function calls) is limited to
// MaxDepth, text to MaxTextLength UTF-16 characters, an action to
// MaxStatements statements.
//
// # Names
//
// A bare name is a user (application) property, as is user.name; names
// are case-insensitive (upper-cased character by character, like .NET's
// OrdinalIgnoreCase; an exact match wins, then the smallest matching key).
// Looking up a name the message lacks scans its properties. sys.name is a system property under its legacy
// BrokeredMessage name (sys.Label, not sys.Subject, which is accepted as
// an alias); see SystemPropertyNames. An unknown sys. name is a compile
// error. property(expr) and p(expr) look up a user property by a computed
// name, never a system one: property('sys.Label') reads a user property
// named "sys.Label". @name is a rule parameter, bound at compile time.
//
// # Evaluation
//
// Values are Int64, Double, String, Boolean, DateTime, TimeSpan, Guid and
// Null; message integers of every width are Int64. The operators follow C#
// typing, with no conversion between strings and numbers: Int64 and
// Double mix (as Double), strings compare ordinally and concatenate with
// +, DateTime - DateTime is a TimeSpan, Boolean and Guid have only = and
// <>. Applying an operator to operands it is not defined for, dividing an
// integer by zero and similar failures stop evaluation with an *EvalError
// whose Type is the .NET exception name the service would report (the
// broker dead-letters with it, or counts the rule as not matching).
//
// A missing user property, and a property whose value is null, is
// unknown. Arithmetic, comparisons and LIKE with an unknown operand are
// unknown; so is IN with an unknown left side, or with no equal element
// and an unknown one. AND, OR and NOT follow the SQL truth tables, with
// left-to-right short-circuiting (FALSE AND x and TRUE OR x do not
// evaluate x). IS NULL is TRUE for a missing or null property; EXISTS is
// TRUE for a present one. A filter matches only when it evaluates to TRUE.
package filter
