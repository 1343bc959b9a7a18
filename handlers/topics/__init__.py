"""Topics: the lines of work within a session (contract section 21), pure, no I/O or clock.

words    a message's keyword stems, as recall stems words, and when it is too short to judge
profile  what a topic is compared by: its recent messages' stems and meaning
assign   which topic a message belongs to, and which topic a resume query names
loops    open loops: questions not yet answered, promises and to-dos not yet done
extract  the built-in title, labels and summary when the LLM service does not answer
stored   the store's topic step in the database: decide chooses the topic, apply writes it
text     a topic's text as reads show it, made when the stored one is older than its messages
reading  memory::topic::list and memory::topic::get
titles   the LLM's title, labels and summary: what it is shown, its answer, its write

Each module imports only modules listed above it; this file imports nothing. The first five
are pure (no database).
"""
