# Turns a text file into a C source defining `const char SYMBOL[]` and
# `const unsigned long SYMBOL_len`, so the binary carries it.
file(READ ${INPUT} HEX HEX)
string(LENGTH "${HEX}" HEXLEN)
math(EXPR LEN "${HEXLEN} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," BYTES "${HEX}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" BYTES "${BYTES}")
file(WRITE ${OUTPUT} "/* generated from ${INPUT}; do not edit */\nconst char ${SYMBOL}[] = {\n${BYTES}0x00};\nconst unsigned long ${SYMBOL}_len = ${LEN};\n")
