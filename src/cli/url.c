/*
 * url.c - the library's URL parser (src/client/url.c), compiled into the
 * tool as well: doctor and lock info talk to a server directly (server.c),
 * and read a URL exactly as fg_open does, with its messages. The shared
 * library keeps these functions to itself, so the tool's copy of the
 * object code meets no other definition.
 */
#include "../client/error.c"
#include "../client/url.c"
