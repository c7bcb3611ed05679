/* test_fetch.c - which addresses a URL fetch may connect to
 * (fetch_addr_allowed, the check curl's open-socket callback makes on every
 * connection) and the --fetch-allow-networks list (fetch_networks_check).
 * The URL spellings that reach these addresses are driven through a real
 * server in tests/integration/test_fetch_guard.c. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "common/fetch.h"

/* 1 if a connection to the numeric address text may be made. */
static int allowed(const char *addr, const char *allow)
{
    struct sockaddr_in v4 = {.sin_family = AF_INET};
    struct sockaddr_in6 v6 = {.sin6_family = AF_INET6};
    if (inet_pton(AF_INET, addr, &v4.sin_addr) == 1)
        return fetch_addr_allowed((struct sockaddr *)&v4, sizeof v4, allow);
    if (inet_pton(AF_INET6, addr, &v6.sin6_addr) == 1)
        return fetch_addr_allowed((struct sockaddr *)&v6, sizeof v6, allow);
    fail_msg("bad test address %s", addr);
    return -1;
}

static void test_refused_by_default(void **state)
{
    static const char *const refused[] = {
        /* loopback, unspecified, "this network" */
        "127.0.0.1", "127.1.2.3", "127.255.255.254", "0.0.0.0", "0.1.2.3",
        "::1", "::",
        /* RFC 1918, CGNAT */
        "10.0.0.1", "10.255.255.255", "172.16.0.1", "172.31.255.255",
        "192.168.0.1", "192.168.255.255", "100.64.0.1", "100.127.255.255",
        /* link-local, cloud metadata */
        "169.254.169.254", "169.254.0.1", "fe80::1", "febf::1",
        /* ULA, site-local */
        "fc00::1", "fd12:3456:789a::1", "fec0::1",
        /* multicast, reserved, broadcast */
        "224.0.0.1", "239.255.255.250", "ff02::1", "ff0e::1", "240.0.0.1",
        "255.255.255.255",
        /* IETF assignments, benchmarking */
        "192.0.0.8", "198.18.0.1", "198.19.255.255",
        /* IPv4 carried in IPv6: mapped, SIIT, compatible, NAT64 */
        "::ffff:127.0.0.1", "::ffff:7f00:1", "::ffff:10.0.0.1",
        "::ffff:169.254.169.254", "::ffff:0.0.0.0", "::ffff:192.168.1.1",
        "::ffff:0:127.0.0.1", "::127.0.0.1", "::10.1.2.3", "::0.0.0.2",
        "64:ff9b::127.0.0.1", "64:ff9b::a9fe:a9fe", "::ffff:255.255.255.255"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        if (allowed(refused[i], NULL) != 0)
            fail_msg("%s was allowed", refused[i]);
        if (allowed(refused[i], "") != 0)
            fail_msg("%s was allowed with an empty list", refused[i]);
    }
}

static void test_public_allowed(void **state)
{
    static const char *const ok[] = {
        "1.1.1.1",         "8.8.8.8",          "93.184.216.34",
        "100.63.255.255",  "100.128.0.0",      "172.15.255.255",
        "172.32.0.0",      "169.253.255.255",  "192.167.255.255",
        "223.255.255.255", "2606:4700::1111",  "2001:4860:4860::8888",
        "::ffff:8.8.8.8",  "64:ff9b::808:808", "fbff::1"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
        if (allowed(ok[i], NULL) != 1)
            fail_msg("%s was refused", ok[i]);
}

static void test_allow_networks(void **state)
{
    const char *list = "10.0.0.0/8, 127.0.0.1/32,fd00::/8 ,169.254.1.2";
    assert_int_equal(allowed("10.1.2.3", list), 1);
    assert_int_equal(allowed("127.0.0.1", list), 1);
    /* an allowed IPv4 address is allowed in its IPv6-carried forms too */
    assert_int_equal(allowed("::ffff:127.0.0.1", list), 1);
    assert_int_equal(allowed("::ffff:10.9.9.9", list), 1);
    assert_int_equal(allowed("fd00::5", list), 1);
    assert_int_equal(allowed("169.254.1.2", list), 1);
    /* the rest stays refused */
    assert_int_equal(allowed("127.0.0.2", list), 0);
    assert_int_equal(allowed("::1", list), 0);
    assert_int_equal(allowed("11.0.0.1", list), 1); /* public anyway */
    assert_int_equal(allowed("169.254.169.254", list), 0);
    assert_int_equal(allowed("192.168.0.1", list), 0);
    assert_int_equal(allowed("fc00::1", list), 0);
    /* prefix lengths that are not multiples of 8 */
    assert_int_equal(allowed("172.20.0.1", "172.16.0.0/13"), 1);
    assert_int_equal(allowed("172.24.0.1", "172.16.0.0/13"), 0);
    assert_int_equal(allowed("::1", "::1/128"), 1);
    assert_int_equal(allowed("127.3.4.5", "0.0.0.0/0"), 1);
    assert_int_equal(allowed("fe80::1", "::/0"), 1);
}

static void test_networks_check(void **state)
{
    ty_err err = {0};
    static const char *const good[] = {"",
                                       "10.0.0.0/8",
                                       "127.0.0.1",
                                       "10.0.0.0/8,127.0.0.1/32",
                                       " 192.168.0.0/16 , fd00::/8",
                                       "::1",
                                       "::ffff:127.0.0.1/128",
                                       "0.0.0.0/0"};
    for (size_t i = 0; i < sizeof good / sizeof *good; i++)
        if (fetch_networks_check(good[i], "--fetch-allow-networks", &err) !=
            TY_OK)
            fail_msg("'%s' refused: %s", good[i], err.msg);
    static const char *const bad[] = {
        "10.0.0.0/33", "::1/129",      "localhost",   "10.0.0.0/",
        "10.0.0.0/8x", "0x7f000001",   "2130706433",  "127.1",
        "0177.0.0.1",  "10.0.0.0/8,,", "10.0.0.0/-1", "1.2.3.4/0008"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        memset(&err, 0, sizeof err);
        if (fetch_networks_check(bad[i], "--fetch-allow-networks", &err) !=
            TY_EINVAL)
            fail_msg("'%s' accepted", bad[i]);
        assert_string_equal(err.field, "--fetch-allow-networks");
        assert_non_null(strstr(err.msg, "is not an IPv4 or IPv6 address"));
    }
}

/* Not an IP address at all: refused. */
static void test_other_families(void **state)
{
    struct sockaddr sa = {.sa_family = AF_UNIX};
    assert_int_equal(fetch_addr_allowed(&sa, sizeof sa, "0.0.0.0/0"), 0);
    struct sockaddr_in v4 = {.sin_family = AF_INET};
    /* too short for its family */
    assert_int_equal(fetch_addr_allowed((struct sockaddr *)&v4, 4, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused_by_default),
        cmocka_unit_test(test_public_allowed),
        cmocka_unit_test(test_allow_networks),
        cmocka_unit_test(test_networks_check),
        cmocka_unit_test(test_other_families),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
