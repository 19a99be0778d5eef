# Installs this build into a scratch prefix and builds tests/consumer against it
# with find_package(zeroshard), then with pkg-config; runs both.
zs_add_test_run(NAME install_consumer
                COMMAND ${CMAKE_COMMAND} -DBUILD=${CMAKE_BINARY_DIR} -DSRC=${CMAKE_CURRENT_SOURCE_DIR}/consumer
                        -DWORK=${CMAKE_BINARY_DIR}/consumer-test -DCC=${CMAKE_C_COMPILER} -DSAN=${ZS_SANITIZE}
                        -P ${CMAKE_CURRENT_SOURCE_DIR}/scripts/install_consumer.cmake
                TIMEOUT 300)
